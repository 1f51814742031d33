#include "zt/pipe/stage_model.h"

#include <algorithm>
#include <map>

namespace zt::pipe {

std::vector<int> running_units(const nn::Model& model) {
  std::vector<int> out;
  const auto& units = model.units();
  for (size_t i = 0; i < units.size(); ++i) {
    if (!units[i]->passive()) out.push_back(static_cast<int>(i));
  }
  return out;
}

Result<StagePlan> stage_plan(const nn::Model& model, const std::vector<int>& parts, int stage) {
  const std::vector<int> running = running_units(model);
  const int stages = static_cast<int>(parts.size()) - 1;
  ZT_ASSERT(stage >= 0 && stage < stages && parts.back() == static_cast<int>(running.size()),
            "stage_plan: stage {} of a partition {} over {} running units", stage, parts.size(),
            running.size());
  // The stage owning each running unit.
  std::map<int, int> owner;
  for (int s = 0; s < stages; ++s) {
    for (int k = parts[s]; k < parts[s + 1]; ++k) owner[running[k]] = s;
  }
  const auto& units = model.units();
  // Passive units go with the stage of their readers (all readers on one stage).
  std::map<int, int> passive_owner;
  for (const auto& [u, s] : owner) {
    for (int e : units[u]->extra_units()) {
      if (!units[e]->passive()) continue;
      auto [it, fresh] = passive_owner.emplace(e, s);
      if (!fresh && it->second != s) {
        return invalid_argument(
            "unit {} ('{}') is read by units of pipeline stages {} and {}; a passive unit (an "
            "adapter) must stay with its one reader",
            e, units[e]->name(), it->second, s);
      }
    }
  }
  StagePlan plan{.stage = stage};
  std::map<int, int> held;  // unit -> owner stage (== stage unless a copy)
  for (const auto& [u, s] : owner) {
    if (s != stage) continue;
    held[u] = s;
    for (int e : units[u]->extra_units()) {
      if (units[e]->passive()) {
        held[e] = stage;
      } else if (owner.at(e) != stage) {
        held[e] = owner.at(e);  // a copy of another stage's unit (tied weights)
      }
    }
  }
  for (const auto& [u, s] : held) {
    plan.units.push_back(u);
    if (s != stage) {
      plan.copies.push_back(u);
      plan.copy_owners.push_back(s);
    }
  }
  return plan;
}

StageModel::StageModel(std::unique_ptr<nn::Model> whole, const StagePlan& plan)
    : whole_(std::move(whole)), plan_(plan) {
  std::map<int, int> index;  // whole-model index -> stage index
  for (size_t i = 0; i < plan_.units.size(); ++i) index[plan_.units[i]] = static_cast<int>(i);
  for (int u : plan_.units) {
    std::unique_ptr<nn::Unit>& slot = whole_->units()[static_cast<size_t>(u)];
    ZT_ASSERT(slot != nullptr, "StageModel: unit {} was taken already", u);
    std::vector<int> extra;
    for (int e : slot->extra_units()) {
      // A copy's own readers are on its owner's stage: it runs nowhere here, so what it reads
      // does not matter (and need not be held).
      if (auto it = index.find(e); it != index.end()) extra.push_back(it->second);
    }
    slot->set_extra_units(std::move(extra));
    units_.push_back(std::move(slot));
  }
  for (int c : plan_.copies) copy_indices_.push_back(index.at(c));
  set_adapters_json(whole_->adapters_json());  // checkpoints record the whole model's adapters
}

StageModel::~StageModel() {
  units_.clear();  // before whole_, which the units refer to
}

bool StageModel::runs_unit(size_t i) const {
  if (units_[i]->passive()) return false;
  return std::find(copy_indices_.begin(), copy_indices_.end(), static_cast<int>(i)) ==
         copy_indices_.end();
}

}  // namespace zt::pipe
