// Tensor-parallel parts of a model (nn::TransformerConfig::tp_size): each rank's parameters are
// its slice of the one-process model's, value for value. Oracle: the one-process model's own
// initial values, cut by hand here from the layout the layers document (fused q|k|v rows by
// heads, [gate | up] rows, the output projections' input columns, the token table's rows), not
// through slice_runs.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "zt/nn/models/family_names.h"
#include "zt/nn/models/registry.h"
#include "zt/nn/models/transformer.h"
#include "zt/zero/zero_state.h"

namespace zt {
namespace {

using Values = std::map<std::string, std::vector<float>>;

// Every parameter's initial values (seed 5), by name.
Values init_values(nn::Transformer& m) {
  Values out;
  for (auto& u : m.units()) {
    std::vector<float> flat(static_cast<size_t>(u->flat_numel()));
    zero::init_unit_params(*u, flat.data(), 5);
    for (nn::Param* p : u->params()) {
      out[p->name].assign(flat.begin() + p->offset, flat.begin() + p->offset + p->numel());
    }
  }
  return out;
}

// Rows [r0, r1) of a (rows, cols) row-major tensor.
std::vector<float> rows(const std::vector<float>& t, int64_t cols, int64_t r0, int64_t r1) {
  return {t.begin() + r0 * cols, t.begin() + r1 * cols};
}

// Columns [c0, c1) of a (rows, cols) row-major tensor.
std::vector<float> cols(const std::vector<float>& t, int64_t n_cols, int64_t c0, int64_t c1) {
  std::vector<float> out;
  for (size_t r = 0; r < t.size() / static_cast<size_t>(n_cols); ++r) {
    for (int64_t c = c0; c < c1; ++c) out.push_back(t[r * n_cols + c]);
  }
  return out;
}

std::vector<float> cat(std::vector<std::vector<float>> parts) {
  std::vector<float> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void check_config(const std::string& what, const nn::TransformerConfig& config, int T = 2) {
  SCOPED_TRACE(what);
  const nn::TransformerConfig* c = &config;
  nn::Transformer whole(*c);
  const Values full = init_values(whole);
  const int64_t C = c->hidden, HS = c->head_dim, NH = c->n_head, KV = c->n_kv_head, F = c->inner;
  // Fewer key/value heads than ranks: each kept whole by T/KV consecutive ranks.
  const int64_t share = KV < T ? T / KV : 1;
  const int64_t nh = NH / T, kv = KV * share / T, f = F / T;
  const bool gated = c->gated == nn::Gated::kYes;
  int sliced = 0;
  for (int r = 0; r < T; ++r) {
    nn::TransformerConfig tc = *c;
    tc.tp_size = T;
    tc.tp_rank = r;
    ASSERT_TRUE(nn::tensor_parallel_check(tc).is_ok());
    nn::Transformer part(tc);
    const Values mine = init_values(part);
    ASSERT_EQ(mine.size(), full.size());
    const nn::FamilyNames& n = nn::family_names(c->model_type);
    for (const auto& [pname, v] : mine) {
      const std::vector<float>& w = full.at(pname);
      std::vector<float> want = w;  // whole on every rank unless cut below
      // "h.3.attn.c_attn.weight": the layer's name and whether this is its bias.
      const bool bias = pname.size() > 5 && pname.compare(pname.size() - 5, 5, ".bias") == 0;
      const std::string layer = pname.substr(0, pname.rfind('.'));
      const auto is = [&](const std::string& l) {
        return layer.size() > l.size() && layer.compare(layer.size() - l.size() - 1, l.size() + 1,
                                                        "." + l) == 0;
      };
      const int64_t k = bias ? 1 : C;  // a row's length
      if (is(n.qkv)) {
        const int64_t j = r / share;  // the rank's key/value head group
        want = cat({rows(w, k, r * nh * HS, (r + 1) * nh * HS),
                    rows(w, k, NH * HS + j * kv * HS, NH * HS + (j + 1) * kv * HS),
                    rows(w, k, (NH + KV) * HS + j * kv * HS, (NH + KV) * HS + (j + 1) * kv * HS)});
        ++sliced;
      } else if (is(n.attn_out) && !bias) {
        want = cols(w, NH * HS, r * nh * HS, (r + 1) * nh * HS);
        ++sliced;
      } else if (is(n.up)) {
        want = gated ? cat({rows(w, k, r * f, (r + 1) * f), rows(w, k, F + r * f, F + (r + 1) * f)})
                     : rows(w, k, r * f, (r + 1) * f);
        ++sliced;
      } else if (is(n.down) && !bias) {
        want = cols(w, F, r * f, (r + 1) * f);
        ++sliced;
      } else if (pname == n.wte + ".weight" || pname == n.lm_head + ".weight") {
        const int64_t vl = c->padded_vocab_size / T;  // the vocabulary's rows
        want = rows(w, c->embed_dim, r * vl, (r + 1) * vl);
        ++sliced;
      }
      EXPECT_EQ(v, want) << pname << " on tensor-parallel rank " << r;
    }
  }
  EXPECT_GE(sliced, 4 * c->n_layer) << "the layers' parameters were not all recognised";
}

void check_model(const std::string& name) {
  auto c = nn::model_config_named(name);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  check_config(name, *c);
}

TEST(TensorParallel, EachRanksPartsAreTheWholeModelsValues) {
  check_model("gpt2-tiny");   // biases on q|k|v and the MLP, GELU MLP
  check_model("llama-tiny");  // grouped-query attention, [gate | up] rows
  // Parameters of several initialisation blocks (2^20 elements each): the [gate | up] weight
  // has 8, the down projection's columns cross every one of its 4.
  auto c = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(c.is_ok());
  c->n_layer = 1;
  c->hidden = 1024;
  c->embed_dim = 1024;
  c->head_dim = 128;
  c->n_head = 8;
  c->n_kv_head = 4;
  c->inner = 4096;
  check_config("one wide llama block", *c);
  // Key/value heads fewer than the ranks: llama-tiny's 2 over 4 ranks, each head on two.
  auto t = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(t.is_ok());
  check_config("llama-tiny over 4 ranks", *t, 2 * t->n_kv_head);
}

TEST(TensorParallel, RefusesSizesThatDoNotDivideTheModel) {
  auto c = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(c.is_ok());
  nn::TransformerConfig tc = *c;
  // 4 ranks over 6 key/value heads: neither a divisor nor a multiple.
  tc.n_head = 12;
  tc.n_kv_head = 6;
  tc.tp_size = 4;
  const Status s = nn::tensor_parallel_check(tc);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("key/value heads"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace zt
