#include "train_support.h"

#include <signal.h>

#include <atomic>

#include "zt/core/log.h"

namespace zt::cli {

Result<WriteErrorPolicy> write_error_policy(const std::string& value) {
  if (value == "fail") return WriteErrorPolicy::kFail;
  if (value == "warn") return WriteErrorPolicy::kWarn;
  return invalid_argument("--on-write-error must be fail or warn, got '{}'", value);
}

Status MetricsWriter::open(const std::string& path) {
  auto f = OutputFile::create(path, {.mode = OutputMode::kStream, .what = "metrics file"});
  if (!f) return handle(f.status());
  file_.emplace(std::move(f).value());
  return Status::ok();
}

Status MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return Status::ok();
  return handle(file_->write(record.dump() + "\n"));
}

Status MetricsWriter::close() {
  if (!file_) return Status::ok();
  Status s = file_->commit();
  file_.reset();
  return handle(s);
}

Status MetricsWriter::handle(Status s) {
  if (s.is_ok()) return s;
  file_.reset();
  if (policy_ == WriteErrorPolicy::kFail) {
    return Status(s.code(), s.message() + " (--on-write-error warn trains on without it)");
  }
  ZT_LOG_WARN("{}; metrics are no longer written (--on-write-error warn)", s.message());
  return Status::ok();
}

namespace {
std::atomic<int> g_save_signal{0};
void on_save_signal(int sig) {
  g_save_signal.store(sig);
}
}  // namespace

void signal_save_install() {
  struct sigaction action {};
  action.sa_handler = on_save_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

Result<bool> signal_save_requested(Engine& engine) {
  std::vector<double> flag{g_save_signal.load() != 0 ? 1.0 : 0.0};
  ZT_RETURN_IF_ERROR(engine.zero_state().all_reduce_doubles(flag, ReduceOp::kMax));
  return flag[0] != 0.0;
}

}  // namespace zt::cli
