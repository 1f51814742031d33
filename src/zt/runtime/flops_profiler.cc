#include "zt/runtime/flops_profiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "zt/nn/models/family_names.h"

namespace zt {
namespace {

double norm_flops(nn::NormKind kind) { return kind == nn::NormKind::kLayerNorm ? 5.0 : 4.0; }

// A linear layer over `rows` rows, with its adapters.
void add_linear(UnitCost& u, const std::string& name, const nn::Linear& l, double rows) {
  LayerCost c{.name = name,
              .params = l.weight().numel() + (l.bias() != nullptr ? l.bias()->numel() : 0),
              .flops = 2.0 * rows * static_cast<double>(l.in_features() * l.out_features()),
              .macs = rows * static_cast<double>(l.in_features() * l.out_features())};
  u.layers.push_back(c);
  for (const nn::LoraAdapter& a : l.adapters()) {
    const double r = static_cast<double>(a.a->shape[0]);
    const double macs = rows * r * static_cast<double>(l.in_features() + a.rows);
    // (the adapter's parameters belong to its LoRA unit)
    u.layers.push_back({.name = name + ".lora", .params = 0,
                        .flops = 2.0 * macs + rows * static_cast<double>(a.rows), .macs = macs});
  }
}

void add_elementwise(UnitCost& u, const std::string& name, int64_t params, double flops) {
  u.layers.push_back({.name = name, .params = params, .flops = flops, .macs = 0});
}

void finish(UnitCost& u, int64_t unit_params) {
  u.params = unit_params;
  for (const LayerCost& l : u.layers) {
    u.flops += l.flops;
    u.macs += l.macs;
  }
}

int64_t unit_params(nn::Unit& unit) {
  int64_t n = 0;
  for (nn::Param* p : unit.params()) n += p->numel();
  return n;
}

}  // namespace

std::vector<UnitCost> transformer_forward_costs(const nn::Transformer& model_in, int64_t B,
                                                int64_t T) {
  auto& model = const_cast<nn::Transformer&>(model_in);  // reads shapes only
  const nn::TransformerConfig& c = model.transformer_config();
  const double N = static_cast<double>(B * T), C = static_cast<double>(c.hidden);
  const double nf = norm_flops(c.norm);
  std::vector<UnitCost> out;
  for (auto& unit : model.units()) {
    UnitCost u{.name = unit->name(), .params = 0, .flops = 0, .macs = 0, .layers = {}};
    if (unit->passive()) {
      finish(u, unit_params(*unit));
      out.push_back(std::move(u));
      continue;
    }
    if (auto* block = dynamic_cast<nn::TransformerBlock*>(unit.get())) {
      const std::vector<nn::Linear*> l = block->linears();  // qkv, out, up, down
      const double NH = c.n_head, HS = static_cast<double>(c.head_dim);
      const double F = static_cast<double>(c.inner);
      add_elementwise(u, "norm1", c.norm == nn::NormKind::kLayerNorm ? 2 * c.hidden : c.hidden,
                      nf * N * C);
      add_linear(u, "attn.qkv", *l[0], N);
      const double scores = 2.0 * static_cast<double>(B) * NH * static_cast<double>(T) *
                            static_cast<double>(T) * HS;
      u.layers.push_back({.name = "attn.scores", .params = 0, .flops = scores, .macs = scores / 2});
      add_elementwise(u, "attn.softmax", 0,
                      static_cast<double>(B) * NH * static_cast<double>(T) * static_cast<double>(T));
      u.layers.push_back(
          {.name = "attn.context", .params = 0, .flops = scores, .macs = scores / 2});
      add_linear(u, "attn.out", *l[1], N);
      add_elementwise(u, "residual1", 0, N * C);
      add_elementwise(u, "norm2", c.norm == nn::NormKind::kLayerNorm ? 2 * c.hidden : c.hidden,
                      nf * N * C);
      add_linear(u, "mlp.up", *l[2], N);
      add_elementwise(u, "mlp.act", 0, (c.gated == nn::Gated::kYes ? 2.0 : 1.0) * N * F);
      add_linear(u, "mlp.down", *l[3], N);
      add_elementwise(u, "residual2", 0, N * C);
    } else if (unit->name() == "embedding") {
      // Lookups are free; a position table adds, BERT adds token types and normalises, OPT
      // projects.
      const double E = static_cast<double>(c.embed_dim);
      double adds = 0;
      if (c.positions == nn::Positions::kLearned) adds += N * E;
      if (c.type_vocab > 0) adds += N * E;
      add_elementwise(u, "lookup", unit_params(*unit), adds);
      if (c.embed_norm) add_elementwise(u, "norm", 0, 5.0 * N * C);
      if (c.embed_dim != c.hidden) {
        u.layers.push_back({.name = "project_in", .params = 0, .flops = 2.0 * N * E * C,
                            .macs = N * E * C});
      }
    } else {  // the head
      const double E = static_cast<double>(c.embed_dim);
      const double V = static_cast<double>(c.padded_vocab_size);
      if (c.final_norm) add_elementwise(u, "final_norm", 0, nf * N * C);
      if (c.embed_dim != c.hidden) {
        u.layers.push_back({.name = "project_out", .params = 0, .flops = 2.0 * N * C * E,
                            .macs = N * C * E});
      }
      if (c.task == nn::Task::kReward) {
        u.layers.push_back({.name = "score", .params = 0, .flops = 2.0 * N * E, .macs = N * E});
      } else if (c.task == nn::Task::kSequenceClassification) {
        const double rows = static_cast<double>(B);
        u.layers.push_back({.name = "pooler", .params = 0, .flops = 2.0 * rows * C * C + rows * C,
                            .macs = rows * C * C});
        u.layers.push_back({.name = "classifier", .params = 0,
                            .flops = 2.0 * rows * C * c.num_labels,
                            .macs = rows * C * c.num_labels});
      } else {
        if (c.task == nn::Task::kMaskedLM) {
          u.layers.push_back({.name = "transform", .params = 0, .flops = 2.0 * N * C * C + N * C +
                                                                        5.0 * N * C,
                              .macs = N * C * C});
        }
        u.layers.push_back({.name = "lm_head", .params = 0, .flops = 2.0 * N * E * V,
                            .macs = N * E * V});
      }
      // The head's parameters as one figure (the layers above carry 0 each).
      if (!u.layers.empty()) u.layers.front().params = unit_params(*unit);
    }
    finish(u, unit_params(*unit));
    out.push_back(std::move(u));
  }
  return out;
}

UnitForwardTimer::UnitForwardTimer(Device device, Stream stream, size_t units)
    : device_(device), stream_(std::move(stream)) {
  spans_.reserve(units);
  for (size_t u = 0; u < units; ++u) spans_.emplace_back(device);
}

void UnitForwardTimer::before_forward(int unit) {
  if (inner_ != nullptr) inner_->before_forward(unit);
  spans_[static_cast<size_t>(unit)].begin(stream_);
}

void UnitForwardTimer::after_forward(int unit) {
  spans_[static_cast<size_t>(unit)].end(stream_);
  if (inner_ != nullptr) inner_->after_forward(unit);
}

void UnitForwardTimer::before_backward(int unit) {
  if (inner_ != nullptr) inner_->before_backward(unit);
}

void UnitForwardTimer::after_backward(int unit) {
  if (inner_ != nullptr) inner_->after_backward(unit);
}

std::vector<double> UnitForwardTimer::unit_ms() {
  std::vector<double> ms;
  for (EventSpans& s : spans_) ms.push_back(s.elapsed_ms(/*reset=*/false));
  return ms;
}

std::string flops_number(double v, const std::string& unit) {
  const char* suffix[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  double x = v;
  while (std::fabs(x) >= 1000.0 && i < 5) {
    x /= 1000.0;
    ++i;
  }
  if (i == 0) return fmt::format("{:g}{}{}", x, unit.empty() ? "" : " ", unit);
  return fmt::format("{:.2f}{}{}", x, suffix[i], unit);
}

namespace {

std::string latency(double ms) {
  return ms >= 1.0 ? fmt::format("{:.2f} ms", ms) : fmt::format("{:.2f} us", ms * 1000.0);
}

std::string row(const std::string& label, const std::string& value) {
  return fmt::format("{:<70}{}\n", label + ":", value);
}

}  // namespace

std::string flops_profile_report(const FlopsProfileInput& in, const FlopsProfilerOptions& o) {
  double params = 0, fwd_flops = 0, fwd_macs = 0;
  for (const UnitCost& u : in.units) {
    params += static_cast<double>(u.params);
    fwd_flops += u.flops * in.micro_steps;
    fwd_macs += u.macs * in.micro_steps;
  }
  const double fwd_s = in.fwd_ms / 1000.0, bwd_s = in.bwd_ms / 1000.0;
  const double iter_ms = in.fwd_ms + in.bwd_ms + in.step_ms;
  // DeepSpeed: backward = 2 x forward (+1 forward when recomputed).
  const double bwd_factor = in.recompute ? 3.0 : 2.0;
  std::string s;
  s += "\n-------------------------- ZeroTrain Flops Profiler --------------------------\n";
  s += fmt::format("Profile Summary at step {}:\n", in.step);
  s += "Notations:\n"
       "data parallel size (dp_size), model parallel size(mp_size),\n"
       "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
       "number of floating-point operations (flops), floating-point operations per second "
       "(FLOPS),\n"
       "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
       "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n";
  s += row("world size", fmt::format("{}", in.world_size));
  s += row("data parallel size", fmt::format("{}", in.world_size));
  s += row("model parallel size", "1");
  s += row("batch size per GPU", fmt::format("{}", in.micro_batch));
  s += row("params per GPU", flops_number(params));
  s += row("params of model = params per GPU * mp_size", flops_number(params));
  s += row("fwd MACs per GPU", flops_number(fwd_macs, "MACs"));
  s += row("fwd flops per GPU", flops_number(fwd_flops));
  s += row("fwd flops of model = fwd flops per GPU * mp_size", flops_number(fwd_flops));
  s += row("fwd latency", latency(in.fwd_ms));
  s += row("fwd FLOPS per GPU = fwd flops per GPU / fwd latency",
           flops_number(fwd_s > 0 ? fwd_flops / fwd_s : 0, "FLOPS"));
  s += row("bwd latency", latency(in.bwd_ms));
  s += row(fmt::format("bwd FLOPS per GPU = {:g} * fwd flops per GPU / bwd latency", bwd_factor),
           flops_number(bwd_s > 0 ? bwd_factor * fwd_flops / bwd_s : 0, "FLOPS"));
  s += row(fmt::format("fwd+bwd FLOPS per GPU = {:g} * fwd flops per GPU / (fwd+bwd latency)",
                       bwd_factor + 1),
           flops_number(fwd_s + bwd_s > 0 ? (bwd_factor + 1) * fwd_flops / (fwd_s + bwd_s) : 0,
                        "FLOPS"));
  s += row("step latency", latency(in.step_ms));
  s += row("iter latency", latency(iter_ms));
  s += row("FLOPS per GPU = fwd flops per GPU * iter latency",
           flops_number(iter_ms > 0 ? (bwd_factor + 1) * fwd_flops / (iter_ms / 1000.0) : 0,
                        "FLOPS"));
  s += row("samples/second",
           fmt::format("{:.2f}", iter_ms > 0 ? static_cast<double>(in.micro_batch * in.micro_steps *
                                                                   in.world_size) /
                                                   (iter_ms / 1000.0)
                                             : 0.0));

  // Aggregated: depth 0 the model, depth 1 its units, depth 2 the units' layers (by name, summed
  // over the units that have them).
  const int max_depth = o.module_depth < 0 ? 2 : std::min(o.module_depth, 2);
  const int top = std::max(1, o.top_modules);
  s += "\n----------------------------- Aggregated Profile per GPU -----------------------------\n";
  s += fmt::format("Top {} modules in terms of params, MACs or fwd latency at different model "
                   "depths:\n",
                   top);
  double total_ms = 0;
  for (double ms : in.unit_fwd_ms) total_ms += ms;
  for (int depth = 0; depth <= max_depth; ++depth) {
    struct Agg {
      double params = 0, macs = 0, ms = 0;
    };
    std::map<std::string, Agg> agg;
    if (depth == 0) {
      agg[in.model_name] = {params, fwd_macs, total_ms};
    } else {
      for (size_t i = 0; i < in.units.size(); ++i) {
        const UnitCost& u = in.units[i];
        const double ms = i < in.unit_fwd_ms.size() ? in.unit_fwd_ms[i] : 0.0;
        if (depth == 1) {
          agg[u.name] = {static_cast<double>(u.params), u.macs * in.micro_steps, ms};
        } else {
          for (const LayerCost& l : u.layers) {
            Agg& a = agg[l.name];
            a.params += static_cast<double>(l.params);
            a.macs += l.macs * in.micro_steps;
          }
        }
      }
    }
    auto top_by = [&](auto key, const std::string& unit_suffix, bool is_ms) {
      std::vector<std::pair<std::string, double>> v;
      for (const auto& [name, a] : agg) v.emplace_back(name, key(a));
      std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      std::string out = "{";
      for (int k = 0; k < top && k < static_cast<int>(v.size()); ++k) {
        out += fmt::format("{}'{}': '{}'", k ? ", " : "", v[static_cast<size_t>(k)].first,
                           is_ms ? latency(v[static_cast<size_t>(k)].second)
                                 : flops_number(v[static_cast<size_t>(k)].second, unit_suffix));
      }
      return out + "}";
    };
    s += fmt::format("depth {}:\n", depth);
    s += "    params      - " + top_by([](const Agg& a) { return a.params; }, "", false) + "\n";
    s += "    MACs        - " + top_by([](const Agg& a) { return a.macs; }, "MACs", false) + "\n";
    if (depth < 2) {
      s += "    fwd latency - " + top_by([](const Agg& a) { return a.ms; }, "", true) + "\n";
    }
  }

  if (o.detailed) {
    s += "\n------------------------------ Detailed Profile per GPU ------------------------------\n";
    s += "Each module profile is listed after its name in the following order:\n"
         "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
         "percentage of total fwd latency, fwd FLOPS\n"
         "(layers have no latency of their own: units are timed)\n\n";
    auto pct = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
    s += fmt::format("{}(\n  {} Params, {:.2f}% Params, {}, 100.00% MACs, {}, 100.00% latency, {}\n",
                     in.model_name, flops_number(params), 100.0, flops_number(fwd_macs, "MACs"),
                     latency(total_ms),
                     flops_number(total_ms > 0 ? fwd_flops / (total_ms / 1000.0) : 0, "FLOPS"));
    for (size_t i = 0; i < in.units.size(); ++i) {
      const UnitCost& u = in.units[i];
      const double ms = i < in.unit_fwd_ms.size() ? in.unit_fwd_ms[i] : 0.0;
      const double flops = u.flops * in.micro_steps;
      s += fmt::format("  ({}): {} Params, {:.2f}% Params, {}, {:.2f}% MACs, {}, {:.2f}% latency, {}\n",
                       u.name, flops_number(static_cast<double>(u.params)),
                       pct(static_cast<double>(u.params), params),
                       flops_number(u.macs * in.micro_steps, "MACs"),
                       pct(u.macs * in.micro_steps, fwd_macs), latency(ms), pct(ms, total_ms),
                       flops_number(ms > 0 ? flops / (ms / 1000.0) : 0, "FLOPS"));
      if (max_depth < 2) continue;
      for (const LayerCost& l : u.layers) {
        s += fmt::format("    ({}): {} Params, {} flops, {}\n", l.name,
                         flops_number(static_cast<double>(l.params)),
                         flops_number(l.flops * in.micro_steps),
                         flops_number(l.macs * in.micro_steps, "MACs"));
      }
    }
    s += ")\n";
  }
  s += "------------------------------------------------------------------------------\n";
  return s;
}

}  // namespace zt
