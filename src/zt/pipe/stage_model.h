// One pipeline stage's part of a model (DeepSpeed's PipelineModule on one stage): the units a
// partition gives the stage, taken out of a whole model built the ordinary way, which builds no
// parameter memory (units only describe their parameters until an engine binds them).
//
// What a stage holds, in the whole model's order:
//   - its own units: the running (non-passive) units [parts[s], parts[s + 1]) of partition.h;
//   - the passive units its own units read (LoRA adapters): owned here too, reduced with them;
//   - copies of running units of other stages that its own units read (a head tied to the
//     embedding of stage 0: DeepSpeed's TiedLayerSpec). A copy is held, never run: its reader
//     computes with its parameters and accumulates its gradient; the pipeline engine sums that
//     gradient with the owner's (ReduceTiedGrads), so both step alike and stay equal.
// Every unit keeps its parameter names, so the engine initialises it exactly as the whole
// model's unit (ZeroState seeds each parameter by name): a copy starts equal to its owner.
// extra_units are renumbered to the stage's order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/nn/model.h"

namespace zt::pipe {

// Which units of a whole model a stage holds (indices into the whole model's units).
struct StagePlan {
  int stage = 0;
  std::vector<int> units{};  // every unit held, in the whole model's order
  std::vector<int> copies{};  // the subset held as copies of another stage's units
  // For each copy: the stage that owns (runs) it.
  std::vector<int> copy_owners{};
};

// The running units of `model` (not passive), in order: what a partition is over.
std::vector<int> running_units(const nn::Model& model);

// The plan of stage `stage` for the partition `parts` over running_units(model) (partition.h:
// parts[s]..parts[s + 1] index that list). Errors: an extra unit that is itself passive and read
// by units of two stages.
Result<StagePlan> stage_plan(const nn::Model& model, const std::vector<int>& parts, int stage);

class StageModel final : public nn::Model {
 public:
  // Takes the plan's units out of `whole` (which this model keeps alive: units refer to its
  // configuration and shared tables).
  StageModel(std::unique_ptr<nn::Model> whole, const StagePlan& plan);
  ~StageModel() override;

  std::string name() const override { return whole_->name(); }
  int64_t vocab_size() const override { return whole_->vocab_size(); }
  nlohmann::json config_json() const override { return whole_->config_json(); }
  Result<int64_t> check_batch(const Tensor& input, const Tensor& targets) const override {
    return whole_->check_batch(input, targets);
  }
  bool runs_unit(size_t i) const override;

  const StagePlan& plan() const { return plan_; }
  // The stage's indices of its copies of other stages' units (the engine leaves them out of the
  // gradient norm and sums their gradients with the owners').
  const std::vector<int>& copy_indices() const { return copy_indices_; }
  // The whole model the units came from (its configuration: a Transformer's, for instance).
  const nn::Model& whole() const { return *whole_; }

 private:
  std::unique_ptr<nn::Model> whole_;  // outlives units_ (the destructor clears them first)
  StagePlan plan_;
  std::vector<int> copy_indices_;
};

}  // namespace zt::pipe
