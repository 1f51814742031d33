// zero_to_fp32 for ZeroTrain checkpoints (`zt ckpt to-fp32`): the full fp32 weights of every
// parameter, from the ranks' chunks of any world size and stage, as safetensors named by the
// model's parameter names, with the model's config. No engine, no GPU: the checkpoint's metadata
// has the layout (units, parameter offsets and shapes, world size).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "zt/core/status.h"

namespace zt::ckpt {

struct ConsolidateOptions {
  std::string tag;                               // empty: `latest`
  int64_t max_shard_bytes = int64_t{5} << 30;    // DeepSpeed's 5GB default
  std::function<void(const std::string&)> progress;  // told each file written (may be empty)
};

struct ConsolidateSummary {
  std::string tag;
  int64_t parameters = 0;
  int64_t bytes = 0;
  int files = 0;
};

// Writes OUT_DIR/model.safetensors (or model-0000i-of-0000n.safetensors with
// model.safetensors.index.json when larger than max_shard_bytes) and OUT_DIR/config.json. The
// checkpoint's checksums are verified first.
Result<ConsolidateSummary> consolidate_fp32(const std::string& ckpt_dir,
                                            const std::string& out_dir,
                                            const ConsolidateOptions& options);

// "5GB", "500MB", "1.5GiB", "1000000" -> bytes (DeepSpeed's --max_shard_size spelling).
Result<int64_t> byte_size_parse(const std::string& text, std::string_view flag);

}  // namespace zt::ckpt
