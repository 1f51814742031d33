// The key/value cache of incremental decoding: for each attention layer, the rotated keys and the
// values of every position seen so far, (B, KV heads, max_len, head size) in the compute dtype,
// so a decode step projects only the new tokens and reads the cache (kernels/op_table.inc
// kv_cache_update, attention_cached). A forward with Context::kv_cache set treats its tokens as
// positions past_len .. past_len + T - 1 of every row; the caller advances past_len after it.
#pragma once

#include <vector>

#include "zt/core/tensor.h"

namespace zt::nn {

struct KvCache {
  int64_t batch = 0;
  int64_t max_len = 0;   // positions the buffers hold
  int64_t past_len = 0;  // positions already written (the next token's position)
  std::vector<Tensor> k, v;  // per attention layer, allocated by the layer on first use

  KvCache(int64_t batch_size, int64_t max_positions, int num_layers)
      : batch(batch_size), max_len(max_positions), k(num_layers), v(num_layers) {}
};

}  // namespace zt::nn
