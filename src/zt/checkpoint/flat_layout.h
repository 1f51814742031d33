// The unit-flat layout of DESIGN.md as numbers: how a unit of `numel` elements is padded and cut
// into one chunk per rank for a world size. ZeRO (zero/zero_state.h) places its buffers by it;
// checkpoints save each rank's chunk by it, and loading at another world size re-slices by it.
//
// A unit's flat buffer is padded to a multiple of world * kShardAlignElems elements; rank r owns
// elements [r * shard, (r + 1) * shard), shard = padded / world. The padding is never saved: a
// rank saves the part of its chunk inside [0, numel) (possibly empty), so the saved chunks of a
// unit, concatenated in rank order, are its flat buffer exactly, whatever the world size.
#pragma once

#include <cstdint>
#include <vector>

namespace zt::ckpt {

constexpr int64_t kShardAlignElems = 64;

struct FlatChunk {
  int64_t padded = 0;  // the unit's padded flat size for this world size
  int64_t shard = 0;   // padded / world
  int64_t begin = 0;   // rank * shard
  int64_t end = 0;     // begin + shard
  // The saved part: [begin, min(end, numel)), empty when the chunk is all padding.
  int64_t saved_begin = 0, saved_end = 0;
  int64_t saved_numel() const { return saved_end - saved_begin; }
};
FlatChunk flat_chunk(int64_t numel, int world, int rank);

// One contiguous piece of a re-slice: `n` elements from saved rank `rank`'s chunk, starting
// `src_offset` elements into its saved part, landing `dst_offset` elements into the range asked.
struct SlicePiece {
  int rank = 0;
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t n = 0;
};
// The pieces of the chunks saved at `saved_world` ranks that cover elements [begin, end) of a
// unit of `numel` elements (elements at or past numel are padding: not covered, left to the
// caller to zero).
std::vector<SlicePiece> flat_reslice(int64_t numel, int saved_world, int64_t begin, int64_t end);

}  // namespace zt::ckpt
