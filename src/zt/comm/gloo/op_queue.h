// A worker thread that runs a communicator's operations one at a time, in the order they were
// issued (so every rank runs its collectives in the same order), while the caller goes on.
// Each operation may leave a completion step (e.g. waiting for a posted send) that the caller's
// wait() runs; this is what lets two ranks post a send and a recv before either waits.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "zt/comm/communicator.h"

namespace zt {

class OpQueue {
 public:
  // Runs on the worker. Returns the operation's Status; may set `finish`, which wait() runs after.
  using Task = std::function<Status(std::function<Status()>& finish)>;

  OpQueue();
  // Fails operations still queued with `closing` (they never ran), lets the running one finish
  // (it is bounded by its timeout), and joins the worker.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  void set_closing_status(Status closing) { closing_ = std::move(closing); }
  CommHandle enqueue(Task task);

 private:
  class Work;
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Task, std::shared_ptr<Work>>> queue_;
  bool stop_ = false;
  Status closing_{StatusCode::kUnavailable, "the communicator was destroyed before it ran"};
  std::thread thread_;
};

}  // namespace zt
