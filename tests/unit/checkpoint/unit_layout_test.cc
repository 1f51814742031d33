// checkpoint/unit_layout.h: the tensor-parallel record of a unit and the re-slice through whole
// parameters. Oracles: parts of small matrices cut by hand and written out literally here; and
// for the model families, each tensor rank's initial values, which are the one-process model's
// values at the rank's elements (tests/unit/nn/tensor_parallel_test.cc checks that against hand
// cuts), so putting a T-rank layout's buffers back together must give the one-process model's
// buffer, and cutting it again another T's buffers, value for value.
#include "zt/checkpoint/unit_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "zt/checkpoint/flat_layout.h"
#include "zt/checkpoint/model_open.h"
#include "zt/nn/models/registry.h"
#include "zt/nn/models/transformer.h"
#include "zt/zero/zero_state.h"

namespace zt::ckpt {
namespace {

using Floats = std::vector<float>;

// Elements [lo, hi) of a whole parameter put together from the parts through SplitIndex.
Floats gather(const SplitIndex& s, const std::vector<Floats>& parts, int64_t lo, int64_t hi) {
  Floats out(static_cast<size_t>(hi - lo), -1.0f);
  for (const SplitIndex::Piece& p : s.pieces(lo, hi)) {
    EXPECT_GT(p.n, 0);
    for (int64_t i = 0; i < p.n; ++i) {
      out[static_cast<size_t>(p.dst + i)] =
          parts[static_cast<size_t>(p.tensor_rank)][static_cast<size_t>(p.local + i)];
    }
  }
  return out;
}

Floats iota(int64_t n, float first = 0.0f) {
  Floats v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(SplitIndex, RowsOfTwoRanksInSeveralRangesGiveTheWholeBack) {
  // A (6, 3) parameter holding 0..17; rank 0 keeps rows 0, 1 and 4, rank 1 rows 2, 3 and 5 (a
  // fused q|k|v weight keeps one range of rows per projection).
  const std::vector<Floats> parts = {{0, 1, 2, 3, 4, 5, 12, 13, 14},
                                     {6, 7, 8, 9, 10, 11, 15, 16, 17}};
  auto s = SplitIndex::make({6, 3}, 0, {{{0, 2}, {4, 5}}, {{2, 4}, {5, 6}}}, "w");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->part_numel(0), 9);
  EXPECT_EQ(s->part_numel(1), 9);
  const Floats whole = iota(18);
  for (int64_t lo = 0; lo <= 18; ++lo) {
    for (int64_t hi = lo; hi <= 18; ++hi) {
      EXPECT_EQ(gather(*s, parts, lo, hi), Floats(whole.begin() + lo, whole.begin() + hi))
          << "[" << lo << ", " << hi << ")";
    }
  }
  // Whole rows held by one rank come as one piece.
  const auto p = s->pieces(0, 6);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].tensor_rank, 0);
  EXPECT_EQ(p[0].n, 6);
}

TEST(SplitIndex, ColumnsOfTwoRanksGiveTheWholeBack) {
  // A (2, 6) parameter holding 0..11; rank 0 keeps columns 0, 1 and 4, rank 1 columns 2, 3, 5.
  const std::vector<Floats> parts = {{0, 1, 4, 6, 7, 10}, {2, 3, 5, 8, 9, 11}};
  auto s = SplitIndex::make({2, 6}, 1, {{{0, 2}, {4, 5}}, {{2, 4}, {5, 6}}}, "w");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const Floats whole = iota(12);
  for (int64_t lo = 0; lo <= 12; ++lo) {
    for (int64_t hi = lo; hi <= 12; ++hi) {
      EXPECT_EQ(gather(*s, parts, lo, hi), Floats(whole.begin() + lo, whole.begin() + hi))
          << "[" << lo << ", " << hi << ")";
    }
  }
  // One rank holding every column: whole rows merge into one piece.
  auto one = SplitIndex::make({3, 4}, 1, {{{0, 4}}}, "w");
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->pieces(0, 12).size(), 1u);
}

TEST(SplitIndex, OverlappingPartsReadTheLowerRank) {
  // Rows 1-2 are held by both ranks (a head replicated over two): rank 0's copy is read.
  const std::vector<Floats> parts = {{0, 1, 2}, {-1, -2, 3}};
  auto s = SplitIndex::make({4}, 0, {{{0, 3}}, {{1, 4}}}, "w");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(gather(*s, parts, 0, 4), (Floats{0, 1, 2, 3}));
}

TEST(SplitIndex, RefusesPartsThatDoNotMakeTheWhole) {
  auto gap = SplitIndex::make({6, 3}, 0, {{{0, 2}}, {{3, 6}}}, "h.0.w");
  ASSERT_FALSE(gap.is_ok());
  EXPECT_NE(gap.status().message().find("h.0.w: no tensor rank holds row 2"), std::string::npos)
      << gap.status().message();
  auto outside = SplitIndex::make({6, 3}, 0, {{{0, 3}}, {{3, 7}}}, "w");
  ASSERT_FALSE(outside.is_ok());
  EXPECT_NE(outside.status().message().find("tensor rank 1's range [3, 7)"), std::string::npos)
      << outside.status().message();
  EXPECT_FALSE(SplitIndex::make({6, 3}, 0, {{{2, 3}, {0, 2}}, {{3, 6}}}, "w").is_ok());
  EXPECT_FALSE(SplitIndex::make({6, 3}, 2, {{{0, 6}}}, "w").is_ok());
  EXPECT_FALSE(SplitIndex::make({6}, 1, {{{0, 6}}}, "w").is_ok());
}

// ---- the re-slice of hand-made units

// A unit of three parameters: w (4, 3) split by rows, b (5) whole, o (3, 4) split by columns.
class TestUnit : public nn::Unit {
 public:
  TestUnit() : Unit("blk") {}
  Tensor forward(nn::Context&, const Tensor& in) override { return in; }
  Tensor backward(nn::Context&, const Tensor& d) override { return d; }
};

// Tensor rank t of T's part (T = 1: the whole); w's rows and o's columns as given.
std::unique_ptr<nn::Unit> handmade(int T, const DimRanges& w_rows, const DimRanges& o_cols) {
  auto u = std::make_unique<TestUnit>();
  int64_t wr = 0, oc = 0;
  for (auto [a, b] : w_rows) wr += b - a;
  for (auto [a, b] : o_cols) oc += b - a;
  nn::Param& w = u->add_param("w", {wr, 3}, nn::ParamInit::kZeros);
  nn::Param& b = u->add_param("b", {5}, nn::ParamInit::kZeros);
  nn::Param& o = u->add_param("o", {3, oc}, nn::ParamInit::kZeros);
  (void)b;
  if (T > 1) {
    w.slice = nn::ParamSlice{.full = {4, 3}, .dim = 0, .ranges = w_rows};
    o.slice = nn::ParamSlice{.full = {3, 4}, .dim = 1, .ranges = o_cols};
  }
  return u;
}

// The values of the whole parameters: w 100 + e, b 200 + e, o 300 + e.
// Tensor rank t's flat buffer of a handmade unit, written out by hand for the two layouts used:
// w rows {0, 2} | {1, 3}, o columns {0, 1} | {2, 3}. Offsets: w 0, b 16, o 32 (aligned to 16).
Floats saved_buffer(int t) {
  Floats buf(38, 0.0f);
  const Floats w =
      t == 0 ? Floats{100, 101, 102, 106, 107, 108} : Floats{103, 104, 105, 109, 110, 111};
  const Floats b = {200, 201, 202, 203, 204};
  const Floats o =
      t == 0 ? Floats{300, 301, 304, 305, 308, 309} : Floats{302, 303, 306, 307, 310, 311};
  std::copy(w.begin(), w.end(), buf.begin());
  std::copy(b.begin(), b.end(), buf.begin() + 16);
  std::copy(o.begin(), o.end(), buf.begin() + 32);
  return buf;
}

// `dst` of n elements put together from the saved buffers by the pieces (the rest stays 0).
Floats assemble(const std::vector<TensorPiece>& pieces, const std::vector<Floats>& saved,
                int64_t n) {
  Floats out(static_cast<size_t>(n), 0.0f);
  for (const TensorPiece& p : pieces) {
    EXPECT_GE(p.dst, 0);
    EXPECT_LE(p.dst + p.n, n);
    for (int64_t i = 0; i < p.n; ++i) {
      out[static_cast<size_t>(p.dst + i)] =
          saved[static_cast<size_t>(p.tensor_rank)][static_cast<size_t>(p.src + i)];
    }
  }
  return out;
}

Result<SavedUnit> saved_of(std::vector<const nn::Unit*> parts) {
  return saved_unit_parse(unit_json(parts), static_cast<int>(parts.size()), "meta.json");
}

TEST(TensorReslice, HandmadeUnitBetweenLayouts) {
  auto s0 = handmade(2, {{0, 1}, {2, 3}}, {{0, 2}});
  auto s1 = handmade(2, {{1, 2}, {3, 4}}, {{2, 4}});
  ASSERT_EQ(s0->flat_numel(), 38);
  auto saved = saved_of({s0.get(), s1.get()});
  ASSERT_TRUE(saved.is_ok()) << saved.status().message();
  EXPECT_EQ(saved->params[0].whole, (std::vector<int64_t>{4, 3}));
  EXPECT_FALSE(saved->params[1].split.has_value());
  const std::vector<Floats> bufs = {saved_buffer(0), saved_buffer(1)};

  // One process: the whole parameters (w at 0, b at 16, o at 32).
  auto whole = handmade(1, {{0, 4}}, {{0, 4}});
  Floats want(static_cast<size_t>(whole->flat_numel()), 0.0f);
  for (int e = 0; e < 12; ++e) want[static_cast<size_t>(e)] = 100.0f + static_cast<float>(e);
  for (int e = 0; e < 5; ++e) want[static_cast<size_t>(16 + e)] = 200.0f + static_cast<float>(e);
  for (int e = 0; e < 12; ++e) want[static_cast<size_t>(32 + e)] = 300.0f + static_cast<float>(e);
  const int64_t n = whole->flat_numel();
  auto pieces = tensor_reslice(*saved, whole->params(), 0, n, "ckpt");
  ASSERT_TRUE(pieces.is_ok()) << pieces.status().message();
  EXPECT_EQ(assemble(*pieces, bufs, n), want);
  // Any window of it (a ZeRO-1 rank's shard of the buffer).
  for (int64_t lo = 0; lo < n; lo += 5) {
    for (int64_t hi = lo; hi <= n + 7; hi += 3) {
      auto p = tensor_reslice(*saved, whole->params(), lo, hi, "ckpt");
      ASSERT_TRUE(p.is_ok());
      Floats w(static_cast<size_t>(hi - lo), 0.0f);
      for (int64_t e = lo; e < std::min(hi, n); ++e)
        w[static_cast<size_t>(e - lo)] = want[static_cast<size_t>(e)];
      EXPECT_EQ(assemble(*p, bufs, hi - lo), w) << "[" << lo << ", " << hi << ")";
    }
  }

  // The same tensor layout: rank t's buffer, each parameter in one piece from rank t.
  for (int t = 0; t < 2; ++t) {
    nn::Unit& mine = t == 0 ? *s0 : *s1;
    auto same = tensor_reslice(*saved, mine.params(), 0, 38, "ckpt");
    ASSERT_TRUE(same.is_ok());
    for (const TensorPiece& p : *same) {
      const bool b = p.dst >= 16 && p.dst < 32;
      EXPECT_EQ(p.tensor_rank, b ? 0 : t);  // (b is whole on both: rank 0's copy is read)
      EXPECT_EQ(p.src, p.dst);
    }
    EXPECT_EQ(assemble(*same, bufs, 38), bufs[static_cast<size_t>(t)]);
  }

  // Another cut at T = 2: w rows {0, 1} | {2, 3}, o columns {0} | {1, 2, 3}; rank 1's part by
  // hand: w rows 2, 3 = 106..111, b whole, o columns 1-3 = 301 302 303 305 306 307 309 310 311.
  auto other = handmade(2, {{2, 4}}, {{1, 4}});
  auto got = tensor_reslice(*saved, other->params(), 0, other->flat_numel(), "ckpt");
  ASSERT_TRUE(got.is_ok());
  Floats want1(static_cast<size_t>(other->flat_numel()), 0.0f);
  const Floats w1 = {106, 107, 108, 109, 110, 111};
  const Floats o1 = {301, 302, 303, 305, 306, 307, 309, 310, 311};
  std::copy(w1.begin(), w1.end(), want1.begin());
  for (int e = 0; e < 5; ++e) want1[static_cast<size_t>(16 + e)] = 200.0f + static_cast<float>(e);
  std::copy(o1.begin(), o1.end(), want1.begin() + 32);
  EXPECT_EQ(assemble(*got, bufs, other->flat_numel()), want1);
}

TEST(TensorReslice, OneProcessSaveCutForATensorRank) {
  // Saved without tensor parallelism (one buffer: the whole parameters), read by rank 1 of the
  // hand-made T = 2 layout.
  auto whole = handmade(1, {{0, 4}}, {{0, 4}});
  auto saved = saved_of({whole.get()});
  ASSERT_TRUE(saved.is_ok());
  Floats buf(static_cast<size_t>(whole->flat_numel()), 0.0f);
  for (int e = 0; e < 12; ++e) buf[static_cast<size_t>(e)] = 100.0f + static_cast<float>(e);
  for (int e = 0; e < 5; ++e) buf[static_cast<size_t>(16 + e)] = 200.0f + static_cast<float>(e);
  for (int e = 0; e < 12; ++e) buf[static_cast<size_t>(32 + e)] = 300.0f + static_cast<float>(e);
  auto s1 = handmade(2, {{1, 2}, {3, 4}}, {{2, 4}});
  auto p = tensor_reslice(*saved, s1->params(), 0, 38, "ckpt");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  Floats want = saved_buffer(1);
  EXPECT_EQ(assemble(*p, {buf}, 38), want);
}

TEST(TensorReslice, RefusesAnotherModel) {
  auto s0 = handmade(2, {{0, 1}, {2, 3}}, {{0, 2}});
  auto s1 = handmade(2, {{1, 2}, {3, 4}}, {{2, 4}});
  auto saved = saved_of({s0.get(), s1.get()});
  ASSERT_TRUE(saved.is_ok());
  // o of another whole shape.
  auto other = std::make_unique<TestUnit>();
  other->add_param("w", {4, 3}, nn::ParamInit::kZeros);
  other->add_param("b", {5}, nn::ParamInit::kZeros);
  other->add_param("o", {3, 5}, nn::ParamInit::kZeros);
  auto r = tensor_reslice(*saved, other->params(), 0, other->flat_numel(), "ckpt/global_step3");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("checkpoint 'ckpt/global_step3' is of another model: in "
                                      "unit 'blk', parameter 'o' is [3, 4] in the checkpoint, "
                                      "[3, 5] in this run"),
            std::string::npos)
      << r.status().message();
  auto fewer = std::make_unique<TestUnit>();
  fewer->add_param("w", {4, 3}, nn::ParamInit::kZeros);
  EXPECT_FALSE(tensor_reslice(*saved, fewer->params(), 0, fewer->flat_numel(), "c").is_ok());
}

TEST(SavedUnitParse, RefusesDamagedRecords) {
  auto s0 = handmade(2, {{0, 1}, {2, 3}}, {{0, 2}});
  auto s1 = handmade(2, {{1, 2}, {3, 4}}, {{2, 4}});
  const std::vector<const nn::Unit*> parts = {s0.get(), s1.get()};
  const nlohmann::json good = unit_json(parts);
  ASSERT_TRUE(saved_unit_parse(good, 2, "m.json").is_ok());
  // Split parameters in a checkpoint that records no tensor parallelism.
  auto r = saved_unit_parse(good, 1, "m.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'m.json': parameter 'w' is split over 2 tensor ranks"),
            std::string::npos)
      << r.status().message();
  // Ranges whose size is not the recorded part shape.
  nlohmann::json bad = good;
  bad["params"][0]["tensor_parallel"]["ranges"][1] = {{1, 2}};
  r = saved_unit_parse(bad, 2, "m.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("parameter 'w'"), std::string::npos);
  bad = good;
  bad["params"][2]["offset"] = 36;
  EXPECT_FALSE(saved_unit_parse(bad, 2, "m.json").is_ok());
  bad = good;
  bad["params"][0].erase("shape");
  EXPECT_FALSE(saved_unit_parse(bad, 2, "m.json").is_ok());
  // Without tensor parallelism the record is the one a checkpoint always had.
  auto whole = handmade(1, {{0, 4}}, {{0, 4}});
  const nlohmann::json j = unit_json(*whole);
  EXPECT_EQ(j.dump(),
            R"({"name":"blk","numel":44,"params":[{"name":"w","offset":0,"shape":[4,3]},)"
            R"({"name":"b","offset":16,"shape":[5]},{"name":"o","offset":32,"shape":[3,4]}]})");
}

// ---- the model families

// Every unit's initial flat buffer of the model with tensor-parallel rank t of T (T = 1: whole).
struct Built {
  std::unique_ptr<nn::Transformer> model;
  std::vector<Floats> buffers;
};
Built build(const nn::TransformerConfig& c, int t, int T) {
  nn::TransformerConfig tc = c;
  tc.tp_size = T;
  tc.tp_rank = t;
  Built b{std::make_unique<nn::Transformer>(tc), {}};
  for (auto& u : b.model->units()) {
    Floats flat(static_cast<size_t>(u->flat_numel()), 0.0f);
    zero::init_unit_params(*u, flat.data(), 11);
    b.buffers.push_back(std::move(flat));
  }
  return b;
}

void check_family(const std::string& name, const std::vector<int>& sizes) {
  SCOPED_TRACE(name);
  Result<nn::TransformerConfig> c = invalid_argument("no config");
  if (name.find('/') != std::string::npos) {  // a model directory's config.json
    auto opened = model_open(name);
    ASSERT_TRUE(opened.is_ok()) << opened.status().message();
    c = opened->model->transformer_config();
  } else {
    c = nn::model_config_named(name);
  }
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  std::map<int, std::vector<Built>> layouts;  // T -> its ranks
  for (int T : sizes) {
    for (int t = 0; t < T; ++t) layouts[T].push_back(build(*c, t, T));
  }
  const size_t units = layouts[1][0].model->units().size();
  for (const auto& [saved_T, saved_ranks] : layouts) {
    for (const auto& [T, ranks] : layouts) {
      for (size_t u = 0; u < units; ++u) {
        std::vector<const nn::Unit*> parts;
        std::vector<Floats> bufs;
        for (const Built& b : saved_ranks) {
          parts.push_back(b.model->units()[u].get());
          bufs.push_back(b.buffers[u]);
        }
        auto saved = saved_unit_parse(unit_json(parts), saved_T, "m.json");
        ASSERT_TRUE(saved.is_ok()) << saved.status().message();
        for (int t = 0; t < T; ++t) {
          nn::Unit& target = *ranks[static_cast<size_t>(t)].model->units()[u];
          const int64_t n = target.flat_numel();
          const Floats& want = ranks[static_cast<size_t>(t)].buffers[u];
          // The whole buffer, and the chunks of a ZeRO-1 layout of three data-parallel ranks.
          for (int world : {1, 3}) {
            for (int r = 0; r < world; ++r) {
              const FlatChunk ch = flat_chunk(n, world, r);
              auto p = tensor_reslice(*saved, target.params(), ch.begin, ch.end, "ckpt");
              ASSERT_TRUE(p.is_ok()) << p.status().message();
              Floats w(static_cast<size_t>(ch.shard), 0.0f);
              for (int64_t e = ch.saved_begin; e < ch.saved_end; ++e) {
                w[static_cast<size_t>(e - ch.begin)] = want[static_cast<size_t>(e)];
              }
              EXPECT_EQ(assemble(*p, bufs, ch.shard), w)
                  << "unit " << target.name() << " saved at T=" << saved_T << ", read by rank " << t
                  << " of T=" << T << ", chunk " << r << " of " << world;
            }
          }
        }
        // A whole parameter read through SplitIndex (to-fp32) is the one-process value.
        for (const SavedParam& sp : saved->params) {
          const nn::Unit& whole_unit = *layouts[1][0].model->units()[u];
          const nn::Param* wp = nullptr;
          for (nn::Param* q : const_cast<nn::Unit&>(whole_unit).params()) {
            if (q->name == sp.name) wp = q;
          }
          ASSERT_NE(wp, nullptr) << sp.name;
          const Floats& wb = layouts[1][0].buffers[u];
          const Floats want(wb.begin() + wp->offset, wb.begin() + wp->offset + wp->numel());
          Floats got(static_cast<size_t>(wp->numel()), 0.0f);
          for (const SplitIndex::Piece& pc :
               sp.split ? sp.split->pieces(0, wp->numel())
                        : std::vector<SplitIndex::Piece>{{0, 0, 0, wp->numel()}}) {
            for (int64_t i = 0; i < pc.n; ++i) {
              got[static_cast<size_t>(pc.dst + i)] =
                  bufs[static_cast<size_t>(pc.tensor_rank)]
                      [static_cast<size_t>(sp.offset + pc.local + i)];
            }
          }
          EXPECT_EQ(got, want) << sp.name << " saved at T=" << saved_T;
        }
      }
    }
  }
}

TEST(TensorReslice, ModelFamiliesBetweenTensorParallelSizes) {
  check_family("gpt2-tiny", {1, 2, 4});  // q|k|v and MLP biases split, the token table's rows
  check_family("llama-tiny", {1, 2});    // grouped-query heads (two), [gate | up] rows
  // The masked-LM head's bias split with the vocabulary, its transform whole.
  check_family(ZT_SOURCE_DIR "/tests/fixtures/hf/bert_mlm", {1, 2});
}

}  // namespace
}  // namespace zt::ckpt
