// GradBucket: which units' gradients are reduced together (zero_optimization.reduce_bucket_size).
// Units join in the order backward finishes them. DeepSpeed's rule: the bucket is flushed when
// `elems + numel > reduce_bucket_size`, i.e. before a unit that would overflow it, and at the end
// of backward; so a unit larger than the bucket is reduced alone. A bucket that is already full
// (elems >= capacity) would be flushed before any next unit, so it is flushed at once: the same
// grouping, issued one unit earlier. Sizes are the units' padded sizes (what is communicated).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "zt/core/assert.h"

namespace zt::zero {

class GradBucket {
 public:
  explicit GradBucket(int64_t capacity) : capacity_(capacity) {
    ZT_ASSERT(capacity > 0, "reduce bucket capacity {}", capacity);
  }

  // Whether the bucket must be flushed before a unit of `elems` elements joins it.
  bool overflows_with(int64_t elems) const { return !units_.empty() && elems_ + elems > capacity_; }
  void add(int unit, int64_t elems) {
    units_.push_back(unit);
    elems_ += elems;
  }
  // No further unit can join: flush now.
  bool full() const { return elems_ >= capacity_; }
  bool empty() const { return units_.empty(); }
  // The bucket's units, in the order they joined; the bucket is empty after.
  std::vector<int> take() {
    elems_ = 0;
    return std::exchange(units_, {});
  }

 private:
  int64_t capacity_;
  int64_t elems_ = 0;
  std::vector<int> units_;
};

}  // namespace zt::zero
