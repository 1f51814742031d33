// Rotary position embedding (Llama, Qwen2): the frequencies of transformers' RoPE variants that
// keep the attention scale at 1 ("default", "linear", "llama3"), and the cos/sin tables the
// attention kernels read (kernels/ops.h qkv_expand_forward, kv_cache_update).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/core/tensor.h"

namespace zt::nn {

struct RopeConfig {
  std::string type = "default";  // "default", "linear" or "llama3"
  double theta = 10000.0;
  int64_t head_dim = 0;       // rotated dimensions (the whole head)
  int64_t max_positions = 0;  // rows of the tables
  double factor = 1.0;        // linear and llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;  // llama3
};

// The inverse frequencies (head_dim / 2 values), computed in f32 in the order transformers does,
// so the tables agree with its to the last bit that matters.
std::vector<float> rope_inv_freq(const RopeConfig& c);

class Rotary {
 public:
  explicit Rotary(const RopeConfig& config);
  const RopeConfig& config() const { return config_; }
  // (max_positions, head_dim / 2) f32 tables on `device`, made on first use.
  const Tensor& cos(Device device, const Stream& s) { return tables(device, s).cos; }
  const Tensor& sin(Device device, const Stream& s) { return tables(device, s).sin; }

 private:
  struct Tables {
    Tensor cos, sin;
  };
  Tables& tables(Device device, const Stream& s);
  RopeConfig config_;
  Tables host_;
  std::map<std::string, Tables> on_device_;
};

}  // namespace zt::nn
