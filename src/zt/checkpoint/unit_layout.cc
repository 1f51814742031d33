#include "zt/checkpoint/unit_layout.h"

#include <algorithm>
#include <map>

#include <fmt/ranges.h>

#include "zt/core/assert.h"

namespace zt::ckpt {

nlohmann::json unit_json(std::span<const nn::Unit* const> parts) {
  ZT_ASSERT(!parts.empty(), "unit_json: no parts");
  auto& first = const_cast<nn::Unit&>(*parts[0]);
  std::vector<std::vector<nn::Param*>> params;
  for (const nn::Unit* u : parts) params.push_back(const_cast<nn::Unit&>(*u).params());
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < params[0].size(); ++i) {
    const nn::Param& p = *params[0][i];
    nlohmann::json j = {{"name", p.name}, {"offset", p.offset}, {"shape", p.shape.to_vector()}};
    if (parts.size() > 1 && p.slice) {
      nlohmann::json ranges = nlohmann::json::array();
      for (const auto& ps : params) {
        const nn::Param& q = *ps[i];
        ZT_ASSERT(q.slice && q.slice->dim == p.slice->dim && q.slice->full == p.slice->full,
                  "unit '{}': the tensor-parallel parts of '{}' are split unlike", first.name(),
                  p.name);
        ranges.push_back(q.slice->ranges);
      }
      j["tensor_parallel"] = {
          {"whole_shape", p.slice->full.to_vector()}, {"dim", p.slice->dim}, {"ranges", ranges}};
    }
    list.push_back(std::move(j));
  }
  // The parts must be alike: one record describes every tensor rank's buffer.
  for (size_t t = 1; t < parts.size(); ++t) {
    bool alike = parts[t]->flat_numel() == first.flat_numel() && parts[t]->name() == first.name() &&
                 params[t].size() == params[0].size();
    for (size_t i = 0; alike && i < params[0].size(); ++i) {
      const nn::Param &a = *params[0][i], &b = *params[t][i];
      alike = a.name == b.name && a.offset == b.offset && a.shape == b.shape &&
              a.slice.has_value() == b.slice.has_value();
    }
    ZT_ASSERT(alike, "unit '{}': tensor rank {}'s part is laid out unlike rank 0's", first.name(),
              t);
  }
  nlohmann::json unit = {{"name", first.name()}, {"numel", first.flat_numel()}, {"params", list}};
  if (first.frozen()) unit["frozen"] = true;  // its compute copy only: no optimizer state
  return unit;
}

namespace {

// The element count of a shape from a file: nullopt when a dimension is negative or the product
// leaves int64 (damaged metadata must not overflow the arithmetic that follows).
std::optional<int64_t> shape_numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 60)) return std::nullopt;
  }
  return n;
}

}  // namespace

// ---- SplitIndex

Result<SplitIndex> SplitIndex::make(const std::vector<int64_t>& whole, int dim,
                                    const std::vector<DimRanges>& ranges, std::string_view what) {
  if (dim != 0 && dim != 1) {
    return invalid_argument("{}: split along dim {} (0 or 1 expected)", what, dim);
  }
  // (dim 1 splits the columns of a 2-D parameter.)
  const std::optional<int64_t> numel = shape_numel(whole);
  if (whole.empty() || !numel || (dim == 1 && whole.size() != 2) || ranges.empty()) {
    return invalid_argument("{}: a split over {} ranks of a parameter of shape [{}] along dim {}",
                            what, ranges.size(), fmt::join(whole, ", "), dim);
  }
  SplitIndex s;
  s.dim_ = dim;
  s.rows_ = whole[0];
  s.cols_ = s.rows_ > 0 ? *numel / s.rows_ : 0;
  const int64_t extent = dim == 0 ? s.rows_ : whole[1];
  std::vector<Run> all;
  for (size_t t = 0; t < ranges.size(); ++t) {
    int64_t local = 0, last = 0;
    for (const auto& [a, b] : ranges[t]) {
      if (a < last || b < a || b > extent) {
        return invalid_argument(
            "{}: tensor rank {}'s range [{}, {}) is out of order or outside the {} {} of the whole",
            what, t, a, b, extent, dim == 0 ? "rows" : "columns");
      }
      if (b > a) all.push_back({.lo = a, .hi = b, .rank = static_cast<int>(t), .local = local});
      local += b - a;
      last = b;
    }
    s.width_.push_back(local);
  }
  std::stable_sort(all.begin(), all.end(), [](const Run& x, const Run& y) {
    return x.lo != y.lo ? x.lo < y.lo : x.rank < y.rank;
  });
  int64_t covered = 0;
  for (Run r : all) {
    if (r.hi <= covered) continue;  // held by a lower rank already
    if (r.lo > covered) break;
    r.local += covered - r.lo;
    r.lo = covered;
    covered = r.hi;
    s.runs_.push_back(r);
  }
  if (covered != extent) {
    return invalid_argument(
        "{}: no tensor rank holds {} {} of the whole parameter (its parts cover [0, {}) of {})",
        what, dim == 0 ? "row" : "column", covered, covered, extent);
  }
  return s;
}

std::vector<SplitIndex::Piece> SplitIndex::pieces(int64_t lo, int64_t hi) const {
  std::vector<Piece> out;
  auto add = [&](int rank, int64_t local, int64_t dst, int64_t n) {
    if (n <= 0) return;
    if (!out.empty()) {
      Piece& b = out.back();
      if (b.tensor_rank == rank && b.local + b.n == local && b.dst + b.n == dst) {
        b.n += n;
        return;
      }
    }
    out.push_back({.tensor_rank = rank, .local = local, .dst = dst, .n = n});
  };
  if (lo >= hi || cols_ == 0) return out;
  // The first run whose end lies past index i along dim_.
  auto first_run = [&](int64_t i) {
    return std::upper_bound(runs_.begin(), runs_.end(), i,
                            [](int64_t v, const Run& r) { return v < r.hi; });
  };
  if (dim_ == 0) {
    for (auto it = first_run(lo / cols_); it != runs_.end() && it->lo * cols_ < hi; ++it) {
      const int64_t a = std::max(lo, it->lo * cols_), b = std::min(hi, it->hi * cols_);
      add(it->rank, it->local * cols_ + (a - it->lo * cols_), a - lo, b - a);
    }
    return out;
  }
  for (int64_t row = lo / cols_; row * cols_ < hi; ++row) {
    const int64_t c0 = std::max(lo, row * cols_) - row * cols_;
    const int64_t c1 = std::min(hi, (row + 1) * cols_) - row * cols_;
    for (auto it = first_run(c0); it != runs_.end() && it->lo < c1; ++it) {
      const int64_t a = std::max(c0, it->lo), b = std::min(c1, it->hi);
      const int64_t width = width_[static_cast<size_t>(it->rank)];
      add(it->rank, row * width + it->local + (a - it->lo), row * cols_ + a - lo, b - a);
    }
  }
  return out;
}

// ---- the saved unit

int64_t SavedParam::whole_numel() const {
  int64_t n = 1;
  for (int64_t d : whole) n *= d;
  return n;
}

Result<SavedUnit> saved_unit_parse(const nlohmann::json& unit, int tensor_size,
                                   std::string_view where) {
  SavedUnit u;
  try {
    u.name = unit.at("name").get<std::string>();
    u.numel = unit.at("numel").get<int64_t>();
    if (u.numel < 0) {
      return invalid_argument("'{}': unit '{}' has {} elements; the metadata is damaged", where,
                              u.name, u.numel);
    }
    for (const auto& p : unit.at("params")) {
      SavedParam q{.name = p.at("name").get<std::string>(),
                   .offset = p.at("offset").get<int64_t>(),
                   .whole = p.at("shape").get<std::vector<int64_t>>(),
                   .split = std::nullopt};
      // The part's element count: the shape each tensor rank holds.
      const int64_t part = shape_numel(q.whole).value_or(-1);
      if (q.offset < 0 || part < 0 || q.offset > u.numel - part) {
        return invalid_argument(
            "'{}': parameter '{}' of unit '{}' lies outside its unit; the metadata is damaged",
            where, q.name, u.name);
      }
      if (p.contains("tensor_parallel")) {
        const auto& tp = p.at("tensor_parallel");
        const auto ranges = tp.at("ranges").get<std::vector<DimRanges>>();
        if (tensor_size <= 1 || static_cast<int>(ranges.size()) != tensor_size) {
          return invalid_argument(
              "'{}': parameter '{}' is split over {} tensor ranks in a checkpoint of "
              "tensor_parallel_size {}; the metadata is damaged",
              where, q.name, ranges.size(), tensor_size);
        }
        q.whole = tp.at("whole_shape").get<std::vector<int64_t>>();
        if (!shape_numel(q.whole)) {
          return invalid_argument("'{}': parameter '{}' has the whole shape [{}]; the metadata is "
                                  "damaged",
                                  where, q.name, fmt::join(q.whole, ", "));
        }
        const std::string what = fmt::format("'{}': parameter '{}'", where, q.name);
        ZT_ASSIGN_OR_RETURN(SplitIndex s,
                            SplitIndex::make(q.whole, tp.at("dim").get<int>(), ranges, what));
        for (int t = 0; t < tensor_size; ++t) {
          if (s.part_numel(t) != part) {
            return invalid_argument(
                "{}: tensor rank {}'s part has {} elements, its recorded shape {}; the "
                "metadata is damaged",
                what, t, s.part_numel(t), part);
          }
        }
        q.split = std::move(s);
      }
      u.params.push_back(std::move(q));
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(
        "'{}' lacks a field of a unit's layout or has one of the wrong type ({}); the "
        "checkpoint is damaged or from another version",
        where, e.what());
  }
  return u;
}

// ---- the re-slice

Result<std::vector<TensorPiece>> tensor_reslice(const SavedUnit& saved,
                                                const std::vector<nn::Param*>& target,
                                                int64_t begin, int64_t end,
                                                std::string_view where) {
  std::map<std::string, const SavedParam*> by_name;
  for (const SavedParam& p : saved.params) by_name[p.name] = &p;
  auto another_model = [&](const std::string& detail) {
    return invalid_argument(
        "checkpoint '{}' is of another model: in unit '{}', {} (check --model and its sizes)",
        where, saved.name, detail);
  };
  if (target.size() != saved.params.size()) {
    return another_model(fmt::format("the checkpoint has {} parameters, this run's model {}",
                                     saved.params.size(), target.size()));
  }
  std::vector<TensorPiece> out;
  auto add = [&](int rank, int64_t src, int64_t dst, int64_t n) {
    if (n <= 0) return;
    if (!out.empty()) {
      TensorPiece& b = out.back();
      if (b.tensor_rank == rank && b.src + b.n == src && b.dst + b.n == dst) {
        b.n += n;
        return;
      }
    }
    out.push_back({.tensor_rank = rank, .src = src, .dst = dst, .n = n});
  };
  for (const nn::Param* p : target) {
    const auto it = by_name.find(p->name);
    if (it == by_name.end()) {
      return another_model(
          fmt::format("this run's parameter '{}' is not in the checkpoint", p->name));
    }
    const SavedParam& q = *it->second;
    const std::vector<int64_t> whole = p->slice ? p->slice->full.to_vector() : p->shape.to_vector();
    if (whole != q.whole) {
      return another_model(fmt::format("parameter '{}' is [{}] in the checkpoint, [{}] in this run",
                                       p->name, fmt::join(q.whole, ", "), fmt::join(whole, ", ")));
    }
    const int64_t a = std::max(begin, p->offset) - p->offset;
    const int64_t b = std::min(end, p->offset + p->numel()) - p->offset;
    if (a >= b) continue;
    // This run's elements [a, b) of the parameter as runs of the whole parameter's elements, and
    // each run's place among the saved parts.
    const std::vector<std::pair<int64_t, int64_t>> runs =
        p->slice ? nn::slice_runs(*p->slice, a, b)
                 : std::vector<std::pair<int64_t, int64_t>>{{a, b}};
    int64_t dst = p->offset + a - begin;
    for (const auto& [x, y] : runs) {
      if (!q.split) {
        add(0, q.offset + x, dst, y - x);
      } else {
        for (const SplitIndex::Piece& s : q.split->pieces(x, y)) {
          add(s.tensor_rank, q.offset + s.local, dst + s.dst, s.n);
        }
      }
      dst += y - x;
    }
  }
  return out;
}

}  // namespace zt::ckpt
