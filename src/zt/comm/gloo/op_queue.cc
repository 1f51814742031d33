// OpQueue (op_queue.h).
#include "zt/comm/gloo/op_queue.h"

namespace zt {

class OpQueue::Work final : public CommWork {
 public:
  void complete(Status s, std::function<Status()> finish) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(s);
    finish_ = std::move(finish);
    done_ = true;
    cv_.notify_all();
  }

  Status wait() override {
    // One waiter at a time runs the completion step; later waiters see its result.
    std::lock_guard<std::mutex> wait_lock(wait_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (finish_) {
      std::function<Status()> finish = std::move(finish_);
      finish_ = nullptr;
      lock.unlock();
      Status s = finish();
      lock.lock();
      status_ = std::move(s);
    }
    return status_;
  }

 private:
  std::mutex wait_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::function<Status()> finish_;
};

OpQueue::OpQueue() : thread_([this] { run(); }) {}

OpQueue::~OpQueue() {
  std::deque<std::pair<Task, std::shared_ptr<Work>>> abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    abandoned.swap(queue_);
    cv_.notify_all();
  }
  for (auto& [task, work] : abandoned) work->complete(closing_, nullptr);
  thread_.join();
}

CommHandle OpQueue::enqueue(Task task) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      work->complete(closing_, nullptr);
    } else {
      queue_.emplace_back(std::move(task), work);
      cv_.notify_all();
    }
  }
  return CommHandle(work);
}

void OpQueue::run() {
  while (true) {
    std::pair<Task, std::shared_ptr<Work>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::function<Status()> finish;
    Status s = item.first(finish);
    if (!s.is_ok()) finish = nullptr;
    item.second->complete(std::move(s), std::move(finish));
  }
}

}  // namespace zt
