// DeepSpeed-Chat's --enable-ema: an exponential moving average of a trained model's weights,
// ema = beta * ema + (1 - beta) * w after every step (its moving_average, beta 0.992), saved
// beside the model. Kept in f32 over the part of each unit's master weights this rank holds (its
// own chunk at ZeRO 1-3, the whole unit at 0; the host where the master is offloaded), so it
// costs 4 bytes per parameter divided as the master is. DeepSpeed-Chat keeps its EMA model in
// the training dtype (torch.lerp(w, ema, beta)); f32 rounds less. Frozen units never change:
// their EMA is their value.
#pragma once

#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/core/tensor.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/ppo_math.h"

namespace zt::tasks {

class WeightsEma {
 public:
  // Starts from the engine's current weights.
  static Result<WeightsEma> start(Engine& engine, double beta = ppo::kEmaBeta);
  // After an optimizer step of the engine: folds its new weights in.
  Status update(Engine& engine);
  // The average's whole weights, unit by unit (f32, host), as Engine::gather_master gives the
  // weights. Collective over the engine's ranks.
  Result<std::vector<Tensor>> gather(Engine& engine);
  // The average written as Engine::save_16bit_model writes the model (rank 0 writes; every rank
  // calls), in the training dtype.
  Status save(Engine& engine, const std::string& dir);
  double beta() const { return beta_; }

 private:
  std::vector<Tensor> ema_;  // per unit; undefined for frozen units
  double beta_ = 0.992;
};

}  // namespace zt::tasks
