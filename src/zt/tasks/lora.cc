#include "zt/tasks/lora.h"

#include <cmath>
#include <functional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "zt/checkpoint/hf_weights.h"
#include "zt/nn/models/family_names.h"

namespace zt::tasks {
namespace {

// Block i's adapters: a unit the model never runs (nn::Unit::passive).
class LoraUnit : public nn::Unit {
 public:
  using nn::Unit::Unit;
  bool passive() const override { return true; }
  Tensor forward(nn::Context&, const Tensor&) override {
    throw std::logic_error("a LoRA unit holds parameters only; its block computes with them");
  }
  Tensor backward(nn::Context&, const Tensor&) override {
    throw std::logic_error("a LoRA unit holds parameters only; its block computes with them");
  }
};

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj".
std::string module_of(const std::string& tensor) {
  return tensor.substr(0, tensor.size() - std::string(".weight").size());
}

// PEFT's target_modules rule: the module's full name is the target or ends with "." + target.
bool module_matches(const std::string& module, const std::string& target) {
  return module == target ||
         (module.size() > target.size() &&
          module.compare(module.size() - target.size(), target.size(), target) == 0 &&
          module[module.size() - target.size() - 1] == '.');
}

// The module's name after the block number: "self_attn.q_proj", "attn.c_proj", "mlp.c_proj".
std::string short_name(const std::string& module, const std::string& block_prefix) {
  const size_t at = module.find(block_prefix);
  return at == std::string::npos ? module : module.substr(at + block_prefix.size());
}

template <typename F>
void for_each_block_module(nn::Transformer& model, F&& f) {
  const nn::TransformerConfig& c = model.transformer_config();
  const nn::FamilyNames& names = nn::family_names(c.model_type);
  for (int i = 0; i < c.n_layer; ++i) {
    auto* block = dynamic_cast<nn::TransformerBlock*>(model.units()[1 + i].get());
    if (block == nullptr) throw std::logic_error("transformer unit layout: no block at 1 + i");
    const std::string block_prefix = fmt::format("{}.{}.", names.block, i);
    for (nn::Linear* linear : block->linears()) {
      for (const ckpt::HfPart& part : ckpt::hf_parts(c, linear->weight(), names.hf_prefix)) {
        const std::string module = module_of(part.name);
        f(i, *block, *linear, part, module, short_name(module, block_prefix));
      }
    }
  }
}

}  // namespace

std::vector<std::string> lora_module_names(const nn::Transformer& model) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for_each_block_module(const_cast<nn::Transformer&>(model),
                        [&](int, nn::TransformerBlock&, nn::Linear&, const ckpt::HfPart&,
                            const std::string&, const std::string& name) {
                          if (seen.insert(name).second) out.push_back(name);
                        });
  return out;
}

Status lora_apply(nn::Transformer& model, const LoraOptions& o) {
  if (o.r <= 0) return invalid_argument("--lora-dim must be a positive rank, not {}", o.r);
  if (model.transformer_config().tp_size > 1) {
    return invalid_argument("LoRA adapters on a tensor-parallel model are not supported yet "
                            "(--tensor-parallel-size {}): train them with data or pipeline "
                            "parallelism",
                            model.transformer_config().tp_size);
  }
  if (!(o.alpha > 0.0f) || !std::isfinite(o.alpha)) {
    return invalid_argument("--lora-alpha must be positive, not {}", o.alpha);
  }
  if (!(o.dropout >= 0.0f && o.dropout < 1.0f)) {
    return invalid_argument("--lora-dropout must be in [0, 1), not {}", o.dropout);
  }
  if (!model.adapters_json().is_null()) {
    return invalid_argument("the model already has LoRA adapters");
  }
  const nn::TransformerConfig& c = model.transformer_config();
  const std::string hf_prefix = nn::family_names(c.model_type).hf_prefix;
  std::vector<std::string> known = lora_module_names(model);
  // Every target must name some module, else a typo would train nothing.
  for (const std::string& t : o.modules) {
    bool any = false;
    for (const std::string& k : known) any = any || module_matches(k, t) || k == t;
    if (!any) {
      return invalid_argument(
          "--lora-modules: '{}' is no linear module of this {} model's blocks; its modules are {}",
          t, c.model_type, fmt::join(known, ", "));
    }
  }
  ckpt::LoraRecord record{.r = o.r,
                          .alpha = o.alpha,
                          .dropout = o.dropout,
                          .only_optimize = o.only_optimize,
                          .modules = {},
                          .adapters = {}};
  std::set<std::string> matched;
  const float scale = o.alpha / static_cast<float>(o.r);
  // Adapter units in block order, appended after the head; block i's is created (and becomes
  // unit first_index + its position) when its first adapter is.
  std::vector<std::unique_ptr<LoraUnit>> units;
  std::vector<int> unit_of_block(static_cast<size_t>(c.n_layer), -1);
  const int first_index = static_cast<int>(model.units().size());
  // A Linear's adapters are laid out A, A, ..., then B, B, ...: the A matrices of one input lie
  // back to back, and the Linear computes all their u in one GEMM (nn::adapter_groups). The
  // parts of one Linear come one after another; `pending` holds the current Linear's.
  struct Pending {
    nn::Linear* linear;
    ckpt::HfPart part;
    std::string module, local;
    LoraUnit* unit;
  };
  std::vector<Pending> pending;
  auto flush = [&] {
    std::vector<nn::Param*> as;
    for (const Pending& q : pending) {
      const int64_t in = q.linear->in_features();
      as.push_back(&q.unit->add_param(q.local + ".lora_A.weight", {o.r, in},
                                      nn::ParamInit::kNormal,
                                      static_cast<float>(1.0 / std::sqrt(3.0 * in))));
    }
    for (size_t j = 0; j < pending.size(); ++j) {
      const Pending& q = pending[j];
      nn::Param& a = *as[j];
      nn::Param& b =
          q.unit->add_param(q.local + ".lora_B.weight", {q.part.rows, o.r}, nn::ParamInit::kZeros);
      q.linear->add_adapter({.a = &a,
                             .b = &b,
                             .row0 = q.part.row_begin,
                             .rows = q.part.rows,
                             .scale = scale,
                             .dropout = o.dropout,
                             .salt = std::hash<std::string>{}(a.name)});
      record.adapters.push_back({.base = q.linear->weight().name,
                                 .module = q.module,
                                 .row0 = q.part.row_begin,
                                 .rows = q.part.rows,
                                 .a = a.name,
                                 .b = b.name});
    }
    pending.clear();
  };
  for_each_block_module(
      model, [&](int i, nn::TransformerBlock& block, nn::Linear& linear, const ckpt::HfPart& part,
                 const std::string& module, const std::string& name) {
        bool want = o.modules.empty();
        for (const std::string& t : o.modules) want = want || module_matches(module, t);
        if (!want) return;
        matched.insert(name);
        if (!pending.empty() && pending.back().linear != &linear) flush();
        int& k = unit_of_block[static_cast<size_t>(i)];
        if (k < 0) {
          k = static_cast<int>(units.size());
          units.push_back(std::make_unique<LoraUnit>(fmt::format("lora.{}", i)));
          block.add_extra_unit(first_index + k);
        }
        // Parameter names as the family names its tensors, without the body prefix (as every
        // ZeroTrain parameter): "layers.0.self_attn.q_proj.lora_A.weight".
        const std::string local = module.rfind(hf_prefix, 0) == 0 && !hf_prefix.empty()
                                      ? module.substr(hf_prefix.size())
                                      : module;
        pending.push_back({&linear, part, module, local, units[static_cast<size_t>(k)].get()});
      });
  flush();
  for (auto& unit : units) model.units().push_back(std::move(unit));
  for (const std::string& k : known) {
    if (matched.count(k) != 0) record.modules.push_back(k);
  }
  if (o.only_optimize) {
    // Everything but the adapters is frozen; a reward or classification head is trained (it is
    // new: nothing pretrained to keep).
    for (int u = 0; u < first_index; ++u) {
      const bool head = u == first_index - 1;
      const bool new_head = c.task == nn::Task::kReward || c.task == nn::Task::kSequenceClassification;
      if (!(head && new_head)) model.units()[u]->set_frozen(true);
    }
  }
  model.set_adapters_json(ckpt::lora_json(record));
  return Status::ok();
}

}  // namespace zt::tasks
