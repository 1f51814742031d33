#include "zt/tasks/ema.h"

#include "zt/kernels/ops.h"
#include "zt/zero/zero_state.h"

namespace zt::tasks {

Result<WeightsEma> WeightsEma::start(Engine& engine, double beta) {
  if (!(beta >= 0.0 && beta < 1.0)) {
    return invalid_argument("the EMA's beta must be in [0, 1), got {}", beta);
  }
  zero::ZeroState& z = engine.zero_state();
  const Stream& s = z.options().stream;
  WeightsEma ema;
  ema.beta_ = beta;
  for (int u = 0; u < static_cast<int>(z.units().size()); ++u) {
    if (!z.trainable(u)) {
      ema.ema_.emplace_back();
      continue;
    }
    ZT_ASSIGN_OR_RETURN(const Tensor master, z.master_values(u));
    ema.ema_.push_back(master.clone(s));
  }
  return ema;
}

Status WeightsEma::update(Engine& engine) {
  zero::ZeroState& z = engine.zero_state();
  const Stream& s = z.options().stream;
  for (int u = 0; u < static_cast<int>(ema_.size()); ++u) {
    if (!ema_[static_cast<size_t>(u)].defined()) continue;
    ZT_ASSIGN_OR_RETURN(Tensor master, z.master_values(u));
    Tensor& e = ema_[static_cast<size_t>(u)];
    if (master.device() != e.device()) master = master.to(e.device(), s);
    // ema = beta * ema + (1 - beta) * w
    kernels::scale_inplace(e, static_cast<float>(beta_), s);
    kernels::add_scaled(e, master, static_cast<float>(1.0 - beta_), kernels::Accumulate::kAdd, s);
  }
  return Status::ok();
}

Result<std::vector<Tensor>> WeightsEma::gather(Engine& engine) {
  // The engine's gather with the average in place of each trained unit's master (the frozen
  // units' values as they are).
  return engine.zero_state().gather_master(ema_);
}

Status WeightsEma::save(Engine& engine, const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(std::vector<Tensor> full, gather(engine));
  Status local;
  if (engine.rank() == 0) {
    local = write_model_weights(engine.model(), full, engine.config().compute_dtype(), dir);
  }
  std::vector<double> failed{local.is_ok() ? 0.0 : 1.0};
  ZT_RETURN_IF_ERROR(engine.all_reduce_job(failed, ReduceOp::kMax));
  if (!local.is_ok()) return local.with_context(fmt::format("saving the EMA to '{}': ", dir));
  if (failed[0] != 0.0) return io_error("saving the EMA to '{}' failed on rank 0", dir);
  return Status::ok();
}

}  // namespace zt::tasks
