#include "zt/checkpoint/flat_layout.h"

#include <algorithm>

namespace zt::ckpt {

FlatChunk flat_chunk(int64_t numel, int world, int rank) {
  const int64_t align = kShardAlignElems * world;
  FlatChunk c;
  c.padded = (numel + align - 1) / align * align;
  c.shard = c.padded / world;
  c.begin = static_cast<int64_t>(rank) * c.shard;
  c.end = c.begin + c.shard;
  c.saved_begin = std::min(c.begin, numel);
  c.saved_end = std::min(c.end, numel);
  return c;
}

std::vector<SlicePiece> flat_reslice(int64_t numel, int saved_world, int64_t begin, int64_t end) {
  std::vector<SlicePiece> out;
  end = std::min(end, numel);
  if (begin >= end) return out;
  const int64_t shard = flat_chunk(numel, saved_world, 0).shard;
  for (int r = static_cast<int>(begin / shard); r < saved_world; ++r) {
    const FlatChunk c = flat_chunk(numel, saved_world, r);
    const int64_t lo = std::max(begin, c.saved_begin);
    const int64_t hi = std::min(end, c.saved_end);
    if (lo >= end) break;
    if (lo >= hi) continue;
    out.push_back({.rank = r, .src_offset = lo - c.saved_begin, .dst_offset = lo - begin,
                   .n = hi - lo});
  }
  return out;
}

}  // namespace zt::ckpt
