// LoRA (low-rank adaptation) for fine-tuning, with DeepSpeed-Chat's knobs (lora_dim,
// lora_module_name, only_optimize_lora) spelled as `zt train --lora-dim R --lora-alpha A
// [--lora-dropout P] [--lora-modules q_proj,v_proj] [--only-optimize-lora]`.
//
// An adapter sits on one Hugging Face linear module of a transformer block: W x + scale B A x
// with A (r, in), B (out_rows, r), scale = alpha / r, as PEFT's LoRA layer. ZeroTrain fuses
// q/k/v (and gate/up) into one projection, so an adapter covers the rows of its module inside
// the fused weight (nn::LoraAdapter). Block i's adapters live in their own unit, "lora.<i>",
// appended after the head: a passive unit (never run) that block i reads through its
// extra_units(), so ZeRO shards, gathers and reduces the adapters like any unit. With
// --only-optimize-lora every other unit is frozen (no gradient, no master weights, no optimizer
// state), except a reward or classification head, which is trained with the adapters (its final
// norm too: the unit is ZeRO's granule).
//
// Initialisation: A ~ N(0, 1/(3 in)) (the variance of PEFT's kaiming-uniform(a=sqrt(5))), B = 0,
// so training starts from the base model's function.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/checkpoint/lora_export.h"
#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::tasks {

// (Default member initialisers: designated initialisers may leave out any of them.)
struct LoraOptions {
  int r = 0;             // 0: no adapters
  float alpha = 1.0f;    // DeepSpeed-Chat's lora_scaling (default 1): scale = alpha / r
  float dropout = 0.0f;  // on each adapter's input, training only
  // Hugging Face module names (q_proj, v_proj, c_attn, fc1, query, ...), matched as PEFT's
  // target_modules: the module's name or its last dotted components. Empty: every linear
  // module of the blocks.
  std::vector<std::string> modules{};
  bool only_optimize = false;
};

// Adds the adapters to `model` (before the engine is built) and records them
// (Model::adapters_json: checkpoint/lora_export.h's LoraRecord as JSON). Errors: r, alpha or dropout out of
// range, and module names that match nothing (the message lists the model's modules).
Status lora_apply(nn::Transformer& model, const LoraOptions& options);

// The Hugging Face module names of the blocks' linear layers, in order, without duplicates:
// what --lora-modules accepts for this model.
std::vector<std::string> lora_module_names(const nn::Transformer& model);

}  // namespace zt::tasks
