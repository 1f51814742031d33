// zero_to_fp32 for ZeroTrain checkpoints (`zt ckpt to-fp32`): the full fp32 weights of every
// parameter, from the ranks' chunks of any world size and stage, as safetensors named by the
// model's parameter names, with the model's config. No engine, no GPU: the checkpoint's metadata
// has the layout (units, parameter offsets and shapes, world size).
//
// CheckpointWeights is the reader under it: the one place that turns a checkpoint's rank shards
// back into parameters, range by range, so to-fp32 and `zt ckpt export-hf` (checkpoint/hf_export.h)
// never hold more than the tensor they are writing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/checkpoint/safetensors.h"
#include "zt/checkpoint/unit_layout.h"
#include "zt/core/status.h"

namespace zt::ckpt {

// One parameter as the checkpoint's metadata lays it out: `numel` elements at `offset` of unit
// `unit`'s flat buffer of `unit_numel` elements. Saved with tensor parallelism, `shape` and
// `numel` are the whole parameter's, the unit's buffer is each tensor rank's, and `split` says
// which elements each rank's part holds at `offset` (unset: tensor rank 0 holds it whole).
struct CheckpointParam {
  std::string name;
  std::vector<int64_t> shape;
  int unit = 0;
  int64_t unit_numel = 0, offset = 0, numel = 0;
  std::optional<SplitIndex> split;
};

class CheckpointWeights {
 public:
  // Opens DIR/<tag> (tag empty: the one `latest` names), verifies every file's size and checksum,
  // reads the layout and opens every rank's shard (headers checked).
  static Result<CheckpointWeights> open(const std::string& ckpt_dir, const std::string& tag);

  const std::string& tag() const { return tag_; }
  const std::string& path() const { return path_; }  // DIR/<tag>
  const nlohmann::json& metadata() const { return meta_; }
  const std::vector<CheckpointParam>& params() const { return params_; }
  // The parameter of that name, or null.
  const CheckpointParam* find(const std::string& name) const;
  // Elements [lo, hi) of `p` (row-major in its own shape) as f32, from the fp32 master chunks.
  Status read(const CheckpointParam& p, int64_t lo, int64_t hi, float* out) const;

 private:
  CheckpointWeights() = default;
  std::string tag_, path_;
  nlohmann::json meta_;
  std::vector<CheckpointParam> params_;
  int world_ = 0;
  int tensor_ = 1;               // tensor_parallel_size
  std::vector<int> unit_stage_;  // per unit: the pipeline stage whose files hold it
  // (data-parallel rank, model-parallel rank: stage * tensor_ + tensor rank)
  std::map<std::pair<int, int>, SafetensorsFile> shards_;
};

// Whether DIR looks like a checkpoint folder: it has `latest` or a complete tag folder.
bool is_checkpoint_dir(const std::string& dir);

struct WeightFilesOptions {
  int64_t max_shard_bytes = int64_t{5} << 30;
  std::function<void(const std::string&)> progress;  // told each file written (may be empty)
  std::string_view what = "model weights";           // how errors name the files
};

struct WeightFilesSummary {
  int files = 0;
  int64_t bytes = 0;  // of tensor data (the index's total_size)
};

// Writes `tensors`, in order, as transformers lays weights out: OUT_DIR/model.safetensors, or,
// past max_shard_bytes, model-0000i-of-0000n.safetensors (a tensor larger than the limit alone
// in its file) with model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"});
// every file carries {"format": "pt"}. OUT_DIR is created when missing. Weight files of an
// earlier save that this one did not write are removed afterwards, as save_pretrained does:
// readers disagree on which of two sets wins (transformers takes model.safetensors first, the
// loader here the index).
Result<WeightFilesSummary> weight_files_write(const std::string& out_dir,
                                              const std::vector<TensorToWrite>& tensors,
                                              const WeightFilesOptions& options);

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
