// Monitors: the scalars a run logs per step, written where DeepSpeed's `tensorboard` and
// `csv_monitor` blocks say, in the formats their readers take. Rank 0 writes; events are
// (tag, value, step) with DeepSpeed's tags (Train/Samples/train_loss, .../lr, .../loss_scale)
// against global samples, plus ZeroTrain's own (tokens/s, evaluation metrics).
//   - TensorBoard: OUTPUT_PATH/JOB_NAME/events.out.tfevents.<seconds>.<host>: TFRecord framing
//     (length, masked CRC-32C of the length, data, masked CRC-32C of the data) around Event
//     protobufs (wall_time, step, summary{value{tag, simple_value}}), the first one the
//     "brain.Event:2" file version. CRC-32C is the CPU's SSE4.2 instruction.
//   - CSV: OUTPUT_PATH/JOB_NAME/<tag with '/' and ' ' as '_'>.csv, header "step,<last part of the
//     tag>", one "step,value" row per event, as DeepSpeed's csv_monitor writes them.
// An empty output_path means ./runs (TensorBoard's and DeepSpeed's own default differ by tool;
// ZeroTrain keeps both under the working directory).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"

namespace zt::tools {

struct MonitorEvent {
  std::string tag;
  double value = 0;
  int64_t step = 0;
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  virtual Status write(const std::vector<MonitorEvent>& events) = 0;
  virtual Status flush() = 0;
  virtual std::string describe() const = 0;
};

// The monitors the config's resolved blocks enable (`blocks` as DeepSpeedConfig::blocks holds
// them); none when both are off.
Result<std::vector<std::unique_ptr<Monitor>>> monitors_from_config(const nlohmann::json& blocks);

Result<std::unique_ptr<Monitor>> tensorboard_monitor_create(const std::string& dir);
Result<std::unique_ptr<Monitor>> csv_monitor_create(const std::string& dir);

// The masked CRC-32C of TFRecord framing (exposed for tests).
uint32_t crc32c(const void* data, size_t n);
uint32_t tfrecord_mask(uint32_t crc);

}  // namespace zt::tools
