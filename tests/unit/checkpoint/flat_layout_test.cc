// checkpoint/flat_layout.h against a brute-force oracle: every element of a unit is owned by
// exactly one rank's saved chunk, and a re-slice of any range at any saved world size picks the
// same elements an element-by-element walk of the saved chunks finds.
#include "zt/checkpoint/flat_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace zt::ckpt {
namespace {

TEST(FlatLayout, ChunksArePaddedEqualAndCoverTheUnitOnce) {
  for (int64_t numel : {1, 63, 64, 65, 1000, 4096, 100003}) {
    for (int world : {1, 2, 3, 4, 7, 8}) {
      std::vector<int> owner(static_cast<size_t>(numel), 0);
      int64_t padded = -1;
      for (int r = 0; r < world; ++r) {
        const FlatChunk c = flat_chunk(numel, world, r);
        EXPECT_EQ(c.padded % (kShardAlignElems * world), 0);
        EXPECT_GE(c.padded, numel);
        EXPECT_LT(c.padded - numel, kShardAlignElems * world);
        EXPECT_EQ(c.shard * world, c.padded);
        if (padded >= 0) {
          EXPECT_EQ(c.padded, padded);
        }
        padded = c.padded;
        for (int64_t e = c.saved_begin; e < c.saved_end; ++e) ++owner[static_cast<size_t>(e)];
      }
      for (int64_t e = 0; e < numel; ++e) ASSERT_EQ(owner[static_cast<size_t>(e)], 1) << e;
    }
  }
}

TEST(FlatLayout, ResliceMatchesAnElementWalk) {
  for (int64_t numel : {5, 64, 129, 3000}) {
    for (int saved : {1, 2, 3, 5, 8}) {
      // Where element e was saved: (rank, offset into that rank's saved part).
      std::vector<std::pair<int, int64_t>> where(static_cast<size_t>(numel));
      for (int r = 0; r < saved; ++r) {
        const FlatChunk c = flat_chunk(numel, saved, r);
        for (int64_t e = c.saved_begin; e < c.saved_end; ++e) {
          where[static_cast<size_t>(e)] = {r, e - c.saved_begin};
        }
      }
      for (int now : {1, 2, 4, 6}) {
        for (int r = 0; r < now; ++r) {
          const FlatChunk want = flat_chunk(numel, now, r);
          std::vector<int> hit(static_cast<size_t>(want.shard), 0);
          for (const SlicePiece& p : flat_reslice(numel, saved, want.begin, want.end)) {
            ASSERT_GT(p.n, 0);
            for (int64_t i = 0; i < p.n; ++i) {
              const int64_t e = want.begin + p.dst_offset + i;
              ASSERT_LT(e, numel);
              EXPECT_EQ(where[static_cast<size_t>(e)].first, p.rank);
              EXPECT_EQ(where[static_cast<size_t>(e)].second, p.src_offset + i);
              ++hit[static_cast<size_t>(p.dst_offset + i)];
            }
          }
          // Every element inside the unit is covered once; the padding not at all.
          for (int64_t i = 0; i < want.shard; ++i) {
            EXPECT_EQ(hit[static_cast<size_t>(i)], want.begin + i < numel ? 1 : 0)
                << "numel " << numel << " saved " << saved << " now " << now << " rank " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace zt::ckpt
