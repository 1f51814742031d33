// Pieces of `zt train` around the step loop: the metrics file and what a failed write of it
// does, and the stop-and-save on a signal (--save-on-signal).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_args.h"
#include "zt/core/file_io.h"
#include "zt/tools/monitor.h"
#include "zt/runtime/engine.h"

namespace zt::cli {

// --on-write-error: a monitor's failed write stops the run (kFail) or warns once and stops
// writing that monitor (kWarn). Never silent.
enum class WriteErrorPolicy : unsigned char { kFail, kWarn };
Result<WriteErrorPolicy> write_error_policy(const std::string& value);

// JSON Lines metrics (--metrics-out), written as training goes through the shared writer in
// stream mode: every line is checked (a full disk, /dev/full, a closed pipe).
class MetricsWriter {
 public:
  explicit MetricsWriter(WriteErrorPolicy policy) : policy_(policy) {}
  Status open(const std::string& path);
  // One record; a failure under kWarn logs once and disables the writer (returns ok).
  Status write(const nlohmann::json& record);
  Status close();

 private:
  Status handle(Status s);
  WriteErrorPolicy policy_;
  std::optional<OutputFile> file_;
};

// Token files are memory-mapped: one truncated or replaced under a running job raises SIGBUS on
// the next read. This turns that into one line naming the file(s) and exit code 1 (not a core
// dump).
void data_fault_handler_install(const std::vector<std::string>& data_paths);

// `--data` takes one token file or a blend, WEIGHT FILE pairs (zt/data/blend.h): moves `--data`
// (or `--data=V`) and the values after it, up to the next option, out of `args`. A value is an
// argument that does not start with '-', or a number ("-0.5", refused later as a weight).
// nullopt without --data; an error when it is given twice or without a value.
Result<std::optional<std::vector<std::string>>> data_args_extract(std::vector<std::string>& args);

// --save-on-signal: SIGTERM and SIGUSR1 set a flag instead of ending the process.
// --gradient-checkpointing and --activation-checkpoint-interval N (DeepSpeed PipelineModule's
// activation_checkpoint_interval: 0 off, N units per checkpointed segment) into the engine's
// options: checkpointing on or off, and the segment length. Errors: a negative N, or 0 with
// --gradient-checkpointing.
Status checkpoint_flags(const ParsedArgs& a, EngineOptions& options);

// The training device: each rank's GPU of its local rank (the CPU without one), or --device
// ("cuda" meaning the local rank's GPU); checked to exist.
Result<Device> train_device(const ParsedArgs& a, int local_rank);

// --save and what goes with it: where, every how many steps, how many tags to keep, on SIGTERM
// / SIGUSR1, in the background. Errors: bad numbers, and the others without --save.
struct SaveFlags {
  std::optional<std::string> dir;
  int64_t interval = 0;   // 0: only at the end
  int64_t keep_last = 0;  // 0: keep every tag
  bool on_signal = false;
  bool async = false;
};
Result<SaveFlags> save_flags(const ParsedArgs& a);

// --load's options (--load-tag, --load-module-only, --no-load-*), or an error when those are
// given without --load.
Result<CheckpointLoadOptions> load_flags(const ParsedArgs& a);

// One metrics record to --metrics-out and to the config's monitors (rank 0's): every number but
// step and samples as Train/Samples/<name> against `samples`, with DeepSpeed's train_loss for
// the step loss.
Status record_metrics(MetricsWriter& metrics,
                      const std::vector<std::unique_ptr<tools::Monitor>>& monitors,
                      const nlohmann::json& rec, int64_t samples);

void signal_save_install();
// Whether any rank got such a signal (collective: every rank calls it once per step, so all
// stop at the same step).
Result<bool> signal_save_requested(Engine& engine);

}  // namespace zt::cli
