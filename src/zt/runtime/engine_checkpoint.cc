// Engine::save_checkpoint / load_checkpoint (engine.h): the engine's counters, scheduler, loss
// scaler and optimizer step count go into the metadata JSON; every rank's chunk of the fp32
// master weights and optimizer state into its safetensors shard (ZeroState::read_saved); loading
// re-slices the saved chunks onto this engine's world size and stage (checkpoint/flat_layout.h),
// through whole parameters where the saved tensor-parallel layout differs from this rank's
// (checkpoint/unit_layout.h).
// Every phase ends with the ranks agreeing on success, so one rank's failure is an error on all
// of them, never a rank left waiting.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/flat_layout.h"
#include "zt/checkpoint/hf_export.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/checkpoint/unit_layout.h"
#include "zt/core/file_io.h"
#include "zt/comm/env.h"
#include "zt/core/log.h"
#include "zt/runtime/engine.h"
#include "zt/runtime/engine_graph.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace zt {
namespace {

namespace fs = std::filesystem;

std::string tensor_name(int unit, const std::string& kind) {
  return fmt::format("unit{}.{}", unit, kind);
}

// Tensor kinds a checkpoint holds for unit u: the fp32 weights and every optimizer state, or the
// weights only for a frozen unit (from its compute copy).
int saved_kinds(const zero::ZeroState& zero, int u, const std::vector<std::string>& state_names) {
  return zero.trainable(u) ? 1 + static_cast<int>(state_names.size()) : 1;
}

// Whether the metadata's record of a unit (ckpt::unit_json) lists `m`'s parameters in its order,
// at its offsets and of its shapes.
bool saved_layout_matches(const nlohmann::json& saved, nn::Unit& m) {
  const std::vector<nn::Param*> params = m.params();
  const nlohmann::json& list = saved.at("params");
  if (!list.is_array() || list.size() != params.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const nlohmann::json& q = list[i];
    const nn::Param& p = *params[i];
    if (q.value("name", "") != p.name || q.value("offset", int64_t{-1}) != p.offset ||
        q.value("shape", std::vector<int64_t>{}) != p.shape.to_vector()) {
      return false;
    }
  }
  return true;
}

// A 64-bit value as four exactly representable doubles (collectives carry doubles).
void put_u64(std::vector<double>& v, size_t at, uint64_t x) {
  for (int i = 0; i < 4; ++i) v[at + i] = static_cast<double>((x >> (16 * i)) & 0xffff);
}
uint64_t get_u64(const std::vector<double>& v, size_t at) {
  uint64_t x = 0;
  for (int i = 0; i < 4; ++i) x |= static_cast<uint64_t>(v[at + i]) << (16 * i);
  return x;
}

// The collective timeout (ZT_COMM_TIMEOUT_S / DEEPSPEED_TIMEOUT): how long rank 0's publisher
// waits for the other ranks' shards of an asynchronous save.
double comm_timeout_seconds() {
  auto t = comm_timeout_from(process_env());
  return t.is_ok() ? static_cast<double>(t->count()) / 1000.0 : 1800.0;
}

}  // namespace

// Every rank of the job passes its own outcome of a phase; all return ok only if all were ok. A
// rank that failed returns its own error, the others one naming the failed rank.
static Status agree(Engine& e, const Status& local, std::string_view phase) {
  std::vector<double> v{local.is_ok() ? 0.0 : static_cast<double>(e.job_rank() + 1)};
  if (Status s = e.all_reduce_job(v, ReduceOp::kMax); !s.is_ok()) {
    return Status(s.code(), fmt::format("{}: the ranks could not agree (a rank did not take part: "
                                        "checkpoint calls are collective): {}",
                                        phase, s.message()));
  }
  if (!local.is_ok()) return local;
  if (v[0] != 0.0) {
    return io_error("{}: rank {} failed (its message says why)", phase,
                    static_cast<int>(v[0]) - 1);
  }
  return Status::ok();
}

nlohmann::json Engine::checkpoint_metadata(const std::string& tag,
                                           const nlohmann::json& client) const {
  nlohmann::json units = nlohmann::json::array();
  const auto& cs = options_.checkpoint_stage;
  if (cs) {
    units = cs->whole_units;
  } else {
    for (const auto& u : model_.units()) units.push_back(ckpt::unit_json(*u));
  }
  const LossScalerState& ls = scaler_.state();
  nlohmann::json meta = {
      {"format", ckpt::kFormatName},
      {"version", ckpt::kFormatVersionPlain},
      {"tag", tag},
      {"global_steps", global_steps_},
      {"global_samples", global_samples_},
      {"skipped_steps", skipped_steps_},
      {"micro_steps", micro_steps_},
      {"dp_world_size", comm_->world_size()},
      {"mp_world_size", cs ? cs->stages * cs->tensor : 1},
      {"zero_stage", config_.zero.stage},
      {"dtype", std::string(dtype_name(round_dtype_))},
      {"optimizer",
       {{"type", optim::optimizer_name(optimizer_.spec())},
        {"steps", optimizer_.steps()},
        {"state_names", optim::optimizer_state_names(optimizer_.spec())}}},
      {"loss_scaler",
       {{"cur_scale", ls.cur_scale},
        {"cur_iter", ls.cur_iter},
        {"last_overflow_iter", ls.last_overflow_iter},
        {"cur_hysteresis", ls.cur_hysteresis}}},
      {"lr_scheduler", scheduler_ ? nlohmann::json{{"type", scheduler_->type()},
                                                   {"last_batch_iteration",
                                                    scheduler_->last_batch_iteration()}}
                                  : nlohmann::json(nullptr)},
      {"model",
       {{"name", model_.name()},
        {"config", model_.config_json()},
        {"lora", model_.adapters_json()},
        {"units", units}}},
      {"ds_config", config_to_json(config_)},
      {"client_state", client},
  };
  // (Only with tensor parallelism: a checkpoint without it keeps the format it always had.)
  if (cs && cs->tensor > 1) {
    meta["tensor_parallel_size"] = cs->tensor;
    meta["version"] = ckpt::kFormatVersionTensorParallel;
  }
  return meta;
}

Result<std::string> Engine::save_begin(const std::string& dir, const std::string& tag_in) {
  const int rank = job_rank();
  Status local;
  if (micro_steps_ % config_.gradient_accumulation_steps != 0) {
    local = invalid_argument(
        "save_checkpoint in the middle of gradient accumulation (micro-step {} of {}): the "
        "accumulated gradients are not saved; call it after step() at an accumulation boundary",
        micro_steps_ % config_.gradient_accumulation_steps, config_.gradient_accumulation_steps);
  }
  std::string tag = tag_in.empty() ? fmt::format("global_step{}", global_steps_) : tag_in;
  if (local.is_ok()) local = ckpt::tag_check(tag);
  ZT_RETURN_IF_ERROR(agree(*this, local, "save_checkpoint"));

  // The tag, compared across ranks (checkpoint.tag_validation) and taken from rank 0: one
  // checkpoint needs one folder. Rank 0's bytes travel in the same collective as the hashes.
  constexpr size_t kTagMax = 200;
  std::vector<double> v(8 + kTagMax, 0.0);
  const uint64_t h = XXH3_64bits(tag.data(), tag.size());
  put_u64(v, 0, h);
  for (int i = 0; i < 4; ++i) v[4 + i] = -v[i];
  std::vector<double> mine = v;
  if (rank == 0) {
    for (size_t i = 0; i < tag.size(); ++i) v[8 + i] = static_cast<unsigned char>(tag[i]);
  }
  ZT_RETURN_IF_ERROR(all_reduce_job(v, ReduceOp::kMax));
  bool same = true;
  for (int i = 0; i < 8; ++i) same = same && v[i] == mine[i];
  if (!same) {
    const std::string& mode = config_.checkpoint_tag_validation;
    std::string rank0_tag;
    for (size_t i = 0; i < kTagMax && v[8 + i] != 0.0; ++i) {
      rank0_tag.push_back(static_cast<char>(static_cast<int>(v[8 + i])));
    }
    const std::string msg = fmt::format(
        "checkpoint tag '{}' on rank {} differs from another rank's (rank 0: '{}')", tag, rank,
        rank0_tag);
    if (mode == "FAIL") {
      return invalid_argument("{} (checkpoint.tag_validation is FAIL)", msg);
    }
    if (mode == "WARN") ZT_LOG_WARN("{}; saving under rank 0's tag", msg);
    tag = rank0_tag;
  }

  // Rank 0 makes a fresh partial folder; the others wait for it.
  local = rank == 0 ? ckpt::partial_prepare(dir, tag) : Status::ok();
  ZT_RETURN_IF_ERROR(agree(*this, local, fmt::format("saving checkpoint '{}'", dir)));
  return tag;
}

// The tensors of this rank's shard, in file order: every unit's fp32 master and optimizer state.
std::vector<ckpt::TensorToWrite> Engine::shard_tensors() {
  const std::vector<std::string> state_names = optim::optimizer_state_names(optimizer_.spec());
  std::vector<ckpt::TensorToWrite> tensors;
  const int n_units = static_cast<int>(zero_->units().size());
  const auto& cs = options_.checkpoint_stage;
  for (int u = 0; u < n_units; ++u) {
    // A pipeline stage writes the units it owns, under the whole model's numbers.
    if (cs && !cs->saved[static_cast<size_t>(u)]) continue;
    const int global = cs ? cs->global_unit[static_cast<size_t>(u)] : u;
    const int64_t n = zero_->saved_chunk(u).saved_numel();
    for (int k = 0; k < saved_kinds(*zero_, u, state_names); ++k) {
      tensors.push_back({.name = tensor_name(global, k == 0 ? "fp32" : state_names[k - 1]),
                         .dtype = DType::f32,
                         .shape = {n},
                         .data = nullptr,
                         .produce = [this, u, k](void* buf) {
                           return zero_->read_saved(u, k, static_cast<float*>(buf));
                         }});
    }
  }
  return tensors;
}

Status Engine::save_checkpoint(const std::string& dir, const std::string& tag_in,
                               const nlohmann::json& client_state) {
  ZT_RETURN_IF_ERROR(checkpoint_wait());
  ZT_ASSIGN_OR_RETURN(const std::string tag, save_begin(dir, tag_in));
  const int rank = job_rank(), world = job_world_size();
  const auto& cs = options_.checkpoint_stage;
  const ckpt::ShardPlace place =
      cs ? ckpt::ShardPlace{.stage = cs->stage, .tensor_rank = cs->tensor_rank,
                            .tensor_size = cs->tensor}
         : ckpt::ShardPlace{};
  Status local;

  // Every rank writes its shard, reading each tensor from the training buffers as it goes.
  const std::vector<ckpt::TensorToWrite> tensors = shard_tensors();
  auto written =
      ckpt::shard_write(dir, tag, comm_->rank(), comm_->world_size(), tensors, place);
  // A failed save (a full disk) gives its space back: rank 0 removes the unfinished folder.
  auto drop_partial = [&](Status s) {
    if (!s.is_ok() && rank == 0) ckpt::partial_discard(dir, tag);
    return s;
  };
  ZT_RETURN_IF_ERROR(drop_partial(
      agree(*this, written.status(), fmt::format("saving checkpoint '{}'", dir))));

  // Sizes and checksums of every rank's shard (and its data-parallel and model-parallel rank: the
  // file's name), for the metadata rank 0 writes.
  constexpr size_t kSlot = 7;
  std::vector<double> files(kSlot * static_cast<size_t>(world), 0.0);
  const size_t at = kSlot * static_cast<size_t>(rank);
  put_u64(files, at, written->xxh3);
  files[at + 4] = static_cast<double>(written->bytes);
  files[at + 5] = comm_->rank();
  files[at + 6] = place.mp_rank();
  ZT_RETURN_IF_ERROR(all_reduce_job(files, ReduceOp::kSum));
  local = Status::ok();
  if (rank == 0) {
    nlohmann::json f = nlohmann::json::object();
    for (int r = 0; r < world; ++r) {
      const size_t o = kSlot * static_cast<size_t>(r);
      f[ckpt::shard_file_name(static_cast<int>(files[o + 5]), static_cast<int>(files[o + 6]))] = {
          {"bytes", static_cast<int64_t>(files[o + 4])}, {"xxh3", ckpt::hash_hex(get_u64(files, o))}};
    }
    local = ckpt::checkpoint_finish(dir, tag, checkpoint_metadata(tag, client_state), f, 0);
  }
  ZT_RETURN_IF_ERROR(
      drop_partial(agree(*this, local, fmt::format("saving checkpoint '{}'", dir))));
  if (rank == 0) {
    ZT_LOG_INFO("saved checkpoint {} (step {}, {} rank(s), {:.1f} MiB per rank)",
                ckpt::tag_path(dir, tag), global_steps_, world, written->bytes / 1048576.0);
  }
  return Status::ok();
}

Status Engine::save_checkpoint_async(const std::string& dir, const std::string& tag_in,
                                     const nlohmann::json& client_state, int keep_last) {
  ZT_RETURN_IF_ERROR(checkpoint_wait());
  if (options_.checkpoint_stage) {
    return invalid_argument(
        "asynchronous saves (--save-async) do not work with pipeline stages yet; save "
        "synchronously");
  }
  ZT_ASSIGN_OR_RETURN(const std::string tag, save_begin(dir, tag_in));
  const int rank = comm_->rank(), world = comm_->world_size();
  // The snapshot: every tensor of the shard copied into one host buffer (page-locked on a GPU, so
  // the copies run at the bus's speed), kept between saves. This copy is the training's stall.
  std::vector<ckpt::TensorToWrite> tensors = shard_tensors();
  int64_t total = 0;
  for (const auto& t : tensors) total += t.shape[0];
  if (!save_snapshot_.defined() || save_snapshot_.numel() < total) {
    save_snapshot_ = options_.device.is_cuda()
                         ? Tensor::empty_pinned({std::max<int64_t>(total, 1)}, DType::f32)
                         : Tensor::empty({std::max<int64_t>(total, 1)}, DType::f32, Device::cpu());
  }
  float* at = save_snapshot_.data<float>();
  for (auto& t : tensors) {
    ZT_RETURN_IF_ERROR(t.produce(at));
    t.data = at;
    t.produce = nullptr;
    at += t.shape[0];
  }
  nlohmann::json meta = rank == 0 ? checkpoint_metadata(tag, client_state) : nlohmann::json();
  const double timeout_s = comm_timeout_seconds();
  auto job = std::make_unique<PendingSave>();
  job->path = ckpt::tag_path(dir, tag);
  job->step = global_steps_;
  PendingSave* p = job.get();
  job->thread = std::thread([p, dir, tag, rank, world, keep_last, timeout_s,
                             tensors = std::move(tensors), meta = std::move(meta)]() mutable {
    auto written = ckpt::shard_write(dir, tag, rank, world, tensors);
    if (written) p->bytes = written->bytes;
    Status s = ckpt::shard_note_write(dir, tag, rank, written);
    if (s.is_ok()) s = written.status();
    if (s.is_ok() && rank == 0) {
      auto files = ckpt::shard_notes_wait(dir, tag, world, timeout_s);
      s = files.status();
      if (s.is_ok()) s = ckpt::checkpoint_finish(dir, tag, std::move(meta), *files, keep_last);
      if (!s.is_ok()) ckpt::partial_discard(dir, tag);
    }
    p->result = s;
  });
  pending_save_ = std::move(job);
  return Status::ok();
}

Engine::~Engine() {
  if (Status s = checkpoint_wait(); !s.is_ok()) ZT_LOG_ERROR("{}", s.message());
}

Status Engine::checkpoint_wait() {
  if (!pending_save_) return Status::ok();
  pending_save_->thread.join();
  std::unique_ptr<PendingSave> job = std::move(pending_save_);
  if (job->result.is_ok() && comm_->rank() == 0) {
    ZT_LOG_INFO("saved checkpoint {} (step {}, {} rank(s), {:.1f} MiB per rank, written while "
                "training went on)",
                job->path, job->step, comm_->world_size(), job->bytes / 1048576.0);
  }
  return job->result;
}

Status write_model_weights(nn::Model& model, const std::vector<Tensor>& full, DType out,
                           const std::string& dir, const std::string& file) {
  auto* transformer = dynamic_cast<nn::Transformer*>(&model);
  if (transformer != nullptr && file == "model.safetensors") {
    // The families of nn/models: the folder transformers' from_pretrained loads (their names,
    // fused tensors split, sharded past 5GB), as DeepSpeed's save_16bit_model of a transformers
    // module gives its state dict.
    std::map<const nn::Param*, Tensor> values;
    for (size_t u = 0; u < full.size(); ++u) {
      for (nn::Param* p : model.units()[u]->params()) {
        values[p] = full[u].view(p->offset, {p->numel()});
      }
    }
    ckpt::HfExportSource source;
    source.read = [&values](const nn::Param& p, int64_t lo, int64_t hi, float* dst) {
      const float* src = values.at(&p).data<float>();
      std::copy(src + lo, src + hi, dst);
      return Status::ok();
    };
    source.dtype_of = [out](const std::string&) { return out; };
    source.config_dtype = out;
    ZT_RETURN_IF_ERROR(ckpt::hf_export_model(*transformer, source, dir, {}).status());
    ZT_LOG_INFO("saved the {} model to {} (Hugging Face layout)", dtype_name(out), dir);
    return Status::ok();
  }
  std::vector<ckpt::TensorToWrite> tensors;
  for (size_t u = 0; u < full.size(); ++u) {
    for (nn::Param* p : model.units()[u]->params()) {
      const Tensor src = full[u].view(p->offset, {p->numel()});
      tensors.push_back({.name = p->name,
                         .dtype = out,
                         .shape = p->shape.to_vector(),
                         .data = nullptr,
                         .produce = [src, out](void* buf) {
                           Tensor dst = Tensor::from_blob(buf, src.shape(), out, Device::cpu());
                           dst.copy_from(src);  // f32 -> the training dtype, rounded
                           return Status::ok();
                         }});
    }
  }
  ZT_RETURN_IF_ERROR(ckpt::safetensors_write((fs::path(dir) / file).string(), tensors,
                                             {{"format", "pt"}}, "model weights")
                         .status());
  ZT_RETURN_IF_ERROR(file_write_atomic((fs::path(dir) / "config.json").string(),
                                       model.config_json().dump(2) + "\n", "model config"));
  ZT_LOG_INFO("saved the {} model to {}/{}", dtype_name(out), dir, file);
  return Status::ok();
}

Result<bool> Engine::save_16bit_model(const std::string& dir, const std::string& file) {
  if (options_.checkpoint_stage) {
    return invalid_argument(
        "save_16bit_model with pipeline stages: each stage holds part of the model; save a "
        "checkpoint and export it (zt ckpt export-hf, zt ckpt to-fp32)");
  }
  if (config_.zero.stage == 3 && !config_.zero.stage3_gather_16bit_weights_on_model_save) {
    if (comm_->rank() == 0) {
      ZT_LOG_WARN(
          "Did not save the model {}/{} because `stage3_gather_16bit_weights_on_model_save` is "
          "False (ZeRO stage 3 keeps the weights sharded; `zt ckpt to-fp32` consolidates a "
          "checkpoint instead)",
          dir, file);
    }
    return false;
  }
  ZT_ASSIGN_OR_RETURN(std::vector<Tensor> full, zero_->gather_master());
  Status local;
  if (comm_->rank() == 0) local = write_model_weights(model_, full, round_dtype_, dir, file);
  ZT_RETURN_IF_ERROR(agree(*this, local, fmt::format("saving the model to '{}'", dir)));
  return true;
}

Result<std::optional<LoadedCheckpoint>> Engine::load_checkpoint(
    const std::string& dir, const CheckpointLoadOptions& options) {
  // A captured step refers to buffers the load may replace: the next steps capture anew.
  graph_.reset();
  std::string tag = options.tag;
  if (tag.empty()) {
    auto latest = ckpt::latest_read(dir);
    ZT_RETURN_IF_ERROR(agree(*this, latest.status(), "load_checkpoint"));
    if (!*latest) {
      if (job_rank() == 0) {
        ZT_LOG_WARN(
            "Unable to find latest file at {}/latest, if trying to load latest checkpoint "
            "please ensure this file exists or pass an explicit checkpoint tag when loading a "
            "checkpoint; training starts from the beginning",
            dir);
      }
      return std::optional<LoadedCheckpoint>();
    }
    tag = **latest;
  }
  Status local = ckpt::tag_check(tag);
  const std::string path = ckpt::tag_path(dir, tag);
  nlohmann::json meta;
  if (local.is_ok()) {
    auto m = ckpt::metadata_read(path);
    local = m.status();
    if (m) meta = std::move(m).value();
  }
  // Every rank checks what it will read before any state is replaced.
  if (local.is_ok()) local = restore_from(meta, path, options, RestorePhase::kCheck);
  ZT_RETURN_IF_ERROR(agree(*this, local, fmt::format("loading checkpoint '{}'", path)));
  local = restore_from(meta, path, options, RestorePhase::kApply);
  ZT_RETURN_IF_ERROR(agree(*this, local, fmt::format("loading checkpoint '{}'", path)));
  ZT_RETURN_IF_ERROR(agree(*this, zero_->refresh_params(),
                           fmt::format("loading checkpoint '{}'", path)));
  LoadedCheckpoint out;
  out.path = path;
  out.tag = tag;
  out.client_state = meta.value("client_state", nlohmann::json::object());
  out.saved_world_size = meta.value("dp_world_size", 0);
  out.saved_stage = meta.value("zero_stage", 0);
  if (job_rank() == 0) {
    ZT_LOG_INFO("loaded checkpoint {} (step {}; saved on {} rank(s) at ZeRO stage {}, loaded on "
                "{} at stage {})",
                path, global_steps_, out.saved_world_size, out.saved_stage, comm_->world_size(),
                config_.zero.stage);
  }
  return std::optional<LoadedCheckpoint>(std::move(out));
}

Status Engine::restore_from(const nlohmann::json& meta, const std::string& path,
                            const CheckpointLoadOptions& options, RestorePhase phase) {
  const std::string meta_path = (fs::path(path) / ckpt::kModelStatesFile).string();
  try {
    // The model must be the same: adapters, units, their sizes and parameters.
    const nlohmann::json saved_lora = meta.at("model").value("lora", nlohmann::json(nullptr));
    if (saved_lora != model_.adapters_json()) {
      auto describe = [](const nlohmann::json& l) {
        return l.is_null() ? std::string("no LoRA adapters")
                           : fmt::format("LoRA rank {}, alpha {}, {} adapters{}", l.value("r", 0),
                                         l.value("alpha", 0.0), l.at("adapters").size(),
                                         l.value("only_optimize", false) ? ", only the adapters trained" : "");
      };
      return invalid_argument(
          "checkpoint '{}' was trained with {}, this run has {}: resume with the same --lora-dim, "
          "--lora-alpha, --lora-dropout, --lora-modules and --only-optimize-lora",
          path, describe(saved_lora), describe(model_.adapters_json()));
    }
    const auto& units = meta.at("model").at("units");
    const auto& mine = model_.units();
    // This engine's unit u is the whole model's unit global(u) (a pipeline stage holds some).
    const auto& cs = options_.checkpoint_stage;
    const size_t whole = cs ? cs->whole_units.size() : mine.size();
    auto global = [&](int u) { return cs ? cs->global_unit[static_cast<size_t>(u)] : u; };
    if (units.size() != whole) {
      return invalid_argument(
          "checkpoint '{}' holds a model of {} units ({}), this run's {} has {}: it is a "
          "checkpoint of another model (check --model)",
          path, units.size(), meta.at("model").value("name", "?"), model_.name(), whole);
    }
    const int saved_tensor = meta.value("tensor_parallel_size", 1);
    if (saved_tensor < 1 || saved_tensor > 1 << 16) {
      return invalid_argument("'{}': tensor_parallel_size {} is not a size", meta_path,
                              saved_tensor);
    }
    const int tensor = cs ? cs->tensor : 1;
    // How this rank reads each of its units: straight from one saved tensor rank's buffer where
    // that buffer is laid out as this rank's (always when neither side splits tensors), else piece
    // by piece through the whole parameters (checkpoint/unit_layout.h). The files of a saved
    // unit are those of model-parallel ranks stage * saved_tensor + t.
    struct UnitPlan {
      int64_t saved_numel = 0;  // of each saved tensor rank's flat buffer of the unit
      int mp_base = 0;          // the saved stage * saved_tensor
      bool direct = true;
      int tensor_rank = 0;                    // direct: the saved tensor rank read
      std::vector<ckpt::TensorPiece> pieces{};  // otherwise
    };
    auto plan = [&](int u) -> Result<UnitPlan> {
      const auto& saved = units[static_cast<size_t>(global(u))];
      UnitPlan p{.saved_numel = saved.at("numel").get<int64_t>(),
                 .mp_base = saved.value("stage", 0) * saved_tensor};
      const nn::Unit& m = *mine[static_cast<size_t>(u)];
      // Laid out as this run's unit: the same parameters at the same offsets. A unit whose
      // parameters the checkpoint orders otherwise (an older layout of LoRA's adapters) is read
      // through its parameters by name, as a tensor-parallel re-slice is.
      const bool same_layout = saved_layout_matches(saved, const_cast<nn::Unit&>(m));
      if (saved.at("name") != m.name() ||
          (saved_tensor == 1 && tensor == 1 && same_layout && p.saved_numel != m.flat_numel())) {
        return invalid_argument(
            "checkpoint '{}' is of another model: its unit {} is '{}' with {} elements, this "
            "run's is '{}' with {} (check --model and its sizes)",
            path, global(u), saved.at("name").get<std::string>(), p.saved_numel, m.name(),
            m.flat_numel());
      }
      if (saved_tensor == 1 && tensor == 1 && same_layout) return p;
      ZT_ASSIGN_OR_RETURN(ckpt::SavedUnit su,
                          ckpt::saved_unit_parse(saved, saved_tensor, meta_path));
      const auto [begin, end] = zero_->master_extent(u);
      ZT_ASSIGN_OR_RETURN(p.pieces, ckpt::tensor_reslice(su, const_cast<nn::Unit&>(m).params(),
                                                         begin, end, path));
      // One saved rank's buffer holds this rank's extent element for element: read it whole.
      p.tensor_rank = p.pieces.empty() ? 0 : p.pieces.front().tensor_rank;
      p.direct = p.saved_numel == m.flat_numel() &&
                 std::all_of(p.pieces.begin(), p.pieces.end(), [&](const ckpt::TensorPiece& t) {
                   return t.tensor_rank == p.tensor_rank && t.src == begin + t.dst;
                 });
      if (p.direct) p.pieces.clear();
      return p;
    };
    // (A checkpoint of another model is refused here, naming the first unit that differs.)
    std::vector<UnitPlan> plans;
    for (int u = 0; u < static_cast<int>(mine.size()); ++u) {
      ZT_ASSIGN_OR_RETURN(UnitPlan p, plan(u));
      plans.push_back(std::move(p));
    }
    const int saved_world = meta.at("dp_world_size").get<int>();
    if (saved_world < 1 || saved_world > 1 << 20) {
      return invalid_argument("'{}': dp_world_size {} is not a world size", meta_path,
                              saved_world);
    }
    const auto state_names = optim::optimizer_state_names(optimizer_.spec());
    const auto saved_names = meta.at("optimizer").at("state_names").get<std::vector<std::string>>();
    const bool load_opt = options.load_optimizer_states && !options.load_module_only;
    if (load_opt && saved_names != state_names) {
      return invalid_argument(
          "checkpoint '{}' holds the state of optimizer {}, this run uses {}: load it with "
          "--no-load-optimizer-states (load_optimizer_states=false) to start the optimizer fresh",
          path, meta.at("optimizer").value("type", "?"), optim::optimizer_name(optimizer_.spec()));
    }
    const auto& files = meta.at("files");
    // The shard files, one per (data-parallel rank, model-parallel rank), in a fixed order: file
    // i is verified by job rank i mod the job's size, so every file is verified once, by some
    // rank.
    std::vector<std::pair<int, int>> shard_keys;
    for (int r = 0; r < saved_world; ++r) {
      for (int mp = 0; mp < meta.value("mp_world_size", 1); ++mp) {
        if (files.contains(ckpt::shard_file_name(r, mp))) shard_keys.emplace_back(r, mp);
      }
    }
    auto verifies = [&](std::pair<int, int> key) {
      const auto it = std::find(shard_keys.begin(), shard_keys.end(), key);
      return it != shard_keys.end() &&
             (it - shard_keys.begin()) % job_world_size() == job_rank();
    };
    // Open the shards this rank reads, and check each against the metadata: size and, for the
    // files this rank verifies, the checksum.
    std::map<std::pair<int, int>, ckpt::SafetensorsFile> open;
    auto shard = [&](int r, int mp) -> Result<ckpt::SafetensorsFile*> {
      auto it = open.find({r, mp});
      if (it != open.end()) return &it->second;
      const std::string name = ckpt::shard_file_name(r, mp);
      const std::string file = (fs::path(path) / name).string();
      if (!files.contains(name)) {
        return invalid_argument("'{}' lists no file '{}'; the checkpoint is damaged", meta_path,
                                name);
      }
      ZT_ASSIGN_OR_RETURN(ckpt::SafetensorsFile f, ckpt::SafetensorsFile::open(file));
      const int64_t bytes = files.at(name).at("bytes").get<int64_t>();
      if (f.file_bytes() != bytes) {
        return invalid_argument("checkpoint file '{}' has {} bytes, {} were written: it is "
                                "truncated or damaged; load an earlier tag (--load-tag)",
                                file, f.file_bytes(), bytes);
      }
      return &open.emplace(std::pair{r, mp}, std::move(f)).first->second;
    };
    // Unit u's saved tensor `name` in the shard of data-parallel rank r, model-parallel rank mp,
    // checked to hold that rank's chunk of a buffer of saved_numel elements.
    using Entry = std::pair<ckpt::SafetensorsFile*, const ckpt::TensorEntry*>;
    auto entry = [&](int r, int mp, const std::string& name,
                     int64_t saved_numel) -> Result<Entry> {
      ZT_ASSIGN_OR_RETURN(auto* f, shard(r, mp));
      ZT_ASSIGN_OR_RETURN(const ckpt::TensorEntry* e, f->find(name));
      const int64_t want = ckpt::flat_chunk(saved_numel, saved_world, r).saved_numel();
      if (e->dtype != DType::f32 || e->numel != want) {
        return invalid_argument("'{}': tensor '{}' has {} {} elements, the layout needs {} "
                                "f32; the checkpoint is damaged",
                                f->path(), name, e->numel, e->dtype_name, want);
      }
      return Entry{f, e};
    };
    if (phase == RestorePhase::kCheck) {
      // The shards this rank reads or verifies must be there, of their recorded size, with
      // headers that parse; their checksums are verified as they are read.
      for (const auto& key : shard_keys) {
        if (verifies(key)) ZT_RETURN_IF_ERROR(shard(key.first, key.second).status());
      }
      for (int u = 0; u < static_cast<int>(mine.size()); ++u) {
        const UnitPlan& p = plans[static_cast<size_t>(u)];
        const auto [begin, end] = zero_->master_extent(u);
        if (p.direct) {
          for (const ckpt::SlicePiece& s :
               ckpt::flat_reslice(p.saved_numel, saved_world, begin, end)) {
            ZT_RETURN_IF_ERROR(shard(s.rank, p.mp_base + p.tensor_rank).status());
          }
          continue;
        }
        std::set<std::pair<int, int>> keys;
        for (const ckpt::TensorPiece& t : p.pieces) {
          for (const ckpt::SlicePiece& s :
               ckpt::flat_reslice(p.saved_numel, saved_world, t.src, t.src + t.n)) {
            keys.emplace(s.rank, p.mp_base + t.tensor_rank);
          }
        }
        for (const auto& [r, mp] : keys) ZT_RETURN_IF_ERROR(shard(r, mp).status());
      }
      return Status::ok();
    }

    // What this rank reads: every piece of every (unit, tensor) extent it keeps, as a byte range
    // of a saved shard. What no piece covers (padding, tensors not loaded) is zero.
    struct Need {
      int64_t file_begin = 0, bytes = 0;
      int unit = 0, kind = 0;
      int64_t dst = 0;  // elements into the unit's master extent
    };
    std::map<std::pair<int, int>, std::vector<Need>> needs;
    const int kinds = load_opt ? 1 + static_cast<int>(state_names.size()) : 1;
    std::vector<int> through_whole;  // the units read piece by piece (below)
    for (int u = 0; u < static_cast<int>(mine.size()); ++u) {
      const UnitPlan& p = plans[static_cast<size_t>(u)];
      const auto [begin, end] = zero_->master_extent(u);
      if (!p.direct) through_whole.push_back(u);
      for (int k = 0; k < saved_kinds(*zero_, u, state_names); ++k) {
        ZT_RETURN_IF_ERROR(zero_->zero_extent(u, k));
        if (k >= kinds || !p.direct) continue;
        const std::string name = tensor_name(global(u), k == 0 ? "fp32" : state_names[k - 1]);
        const int mp = p.mp_base + p.tensor_rank;
        for (const ckpt::SlicePiece& s :
             ckpt::flat_reslice(p.saved_numel, saved_world, begin, end)) {
          ZT_ASSIGN_OR_RETURN(const auto fe, entry(s.rank, mp, name, p.saved_numel));
          needs[{s.rank, mp}].push_back({.file_begin = fe.second->begin + s.src_offset * 4,
                                         .bytes = s.n * 4,
                                         .unit = u,
                                         .kind = k,
                                         .dst = s.dst_offset});
        }
      }
    }
    // The shards this rank verifies (shard r goes to rank r mod world) are read once, front to
    // back, hashed as they stream by, and the pieces inside are taken from the stream; pieces of
    // other shards are read directly. A checksum that fails is found after this rank's state
    // was partly replaced: the load then fails on every rank, and the engine must not train on.
    constexpr int64_t kChunk = int64_t{64} << 20;
    const Tensor chunk = options_.device.is_cuda()
                             ? Tensor::empty_pinned({kChunk / 4}, DType::f32)
                             : Tensor::empty({kChunk / 4}, DType::f32, Device::cpu());
    char* buf = static_cast<char*>(chunk.data());
    for (const auto& key : shard_keys) {
      auto& list = needs[key];
      const bool verify = verifies(key);
      if (list.empty() && !verify) continue;
      ZT_ASSIGN_OR_RETURN(auto* f, shard(key.first, key.second));
      std::sort(list.begin(), list.end(),
                [](const Need& a, const Need& b) { return a.file_begin < b.file_begin; });
      if (!verify) {
        for (const Need& n : list) {
          for (int64_t done = 0; done < n.bytes; done += kChunk) {
            const int64_t len = std::min(kChunk, n.bytes - done);
            ZT_RETURN_IF_ERROR(f->read_bytes(n.file_begin + done, len, buf));
            ZT_RETURN_IF_ERROR(zero_->write_range(n.unit, n.kind, n.dst + done / 4,
                                                  reinterpret_cast<float*>(buf), len / 4));
          }
        }
        continue;
      }
      XXH3_state_t* state = XXH3_createState();
      XXH3_64bits_reset(state);
      size_t next = 0;  // the first need not wholly before this chunk
      Status st;
      for (int64_t off = 0; off < f->file_bytes() && st.is_ok(); off += kChunk) {
        const int64_t len = std::min(kChunk, f->file_bytes() - off);
        st = f->read_bytes(off, len, buf);
        if (!st.is_ok()) break;
        XXH3_64bits_update(state, buf, static_cast<size_t>(len));
        while (next < list.size() && list[next].file_begin + list[next].bytes <= off) ++next;
        for (size_t i = next; i < list.size() && list[i].file_begin < off + len; ++i) {
          const Need& n = list[i];
          const int64_t lo = std::max(off, n.file_begin);
          const int64_t hi = std::min(off + len, n.file_begin + n.bytes);
          if (lo >= hi) continue;
          st = zero_->write_range(n.unit, n.kind, n.dst + (lo - n.file_begin) / 4,
                                  reinterpret_cast<float*>(buf + (lo - off)), (hi - lo) / 4);
          if (!st.is_ok()) break;
        }
      }
      const uint64_t h = XXH3_64bits_digest(state);
      XXH3_freeState(state);
      ZT_RETURN_IF_ERROR(st);
      const std::string name = ckpt::shard_file_name(key.first, key.second);
      const std::string want = files.at(name).at("xxh3").get<std::string>();
      if (ckpt::hash_hex(h) != want) {
        return invalid_argument("checkpoint file '{}' fails its checksum (xxh3 {}, expected {}): "
                                "it is damaged; load an earlier tag (--load-tag)",
                                f->path(), ckpt::hash_hex(h), want);
      }
    }
    // The units whose saved tensor layout differs from this rank's: one unit and tensor kind at
    // a time, this rank's extent is put together in host memory from the pieces of the saved
    // tensor ranks' chunks, then written at once (their files' checksums were verified above by
    // whichever rank streams them).
    std::vector<float> staged;
    for (int u : through_whole) {
      const UnitPlan& p = plans[static_cast<size_t>(u)];
      const auto [begin, end] = zero_->master_extent(u);
      for (int k = 0; k < std::min(kinds, saved_kinds(*zero_, u, state_names)); ++k) {
        const std::string name = tensor_name(global(u), k == 0 ? "fp32" : state_names[k - 1]);
        staged.assign(static_cast<size_t>(end - begin), 0.0f);
        for (const ckpt::TensorPiece& t : p.pieces) {
          const int mp = p.mp_base + t.tensor_rank;
          for (const ckpt::SlicePiece& s :
               ckpt::flat_reslice(p.saved_numel, saved_world, t.src, t.src + t.n)) {
            ZT_ASSIGN_OR_RETURN(const auto fe, entry(s.rank, mp, name, p.saved_numel));
            ZT_RETURN_IF_ERROR(fe.first->read(name, s.src_offset, s.n,
                                              staged.data() + t.dst + s.dst_offset));
          }
        }
        ZT_RETURN_IF_ERROR(zero_->write_range(u, k, 0, staged.data(), end - begin));
      }
    }
    // Gradients accumulated before the load belong to the old weights.
    zero_->zero_grads();
    if (options.load_module_only) return Status::ok();
    global_steps_ = meta.at("global_steps").get<int64_t>();
    global_samples_ = meta.at("global_samples").get<int64_t>();
    skipped_steps_ = meta.at("skipped_steps").get<int64_t>();
    micro_steps_ = global_steps_ * config_.gradient_accumulation_steps;
    if (load_opt) {
      optimizer_.set_steps(meta.at("optimizer").at("steps").get<int64_t>());
      const auto& ls = meta.at("loss_scaler");
      LossScalerState st;
      st.cur_scale = ls.at("cur_scale").get<double>();
      st.cur_iter = ls.at("cur_iter").get<int64_t>();
      st.last_overflow_iter = ls.at("last_overflow_iter").get<int64_t>();
      st.cur_hysteresis = ls.at("cur_hysteresis").get<int>();
      scaler_.set_state(st);
    } else {
      optimizer_.set_steps(0);
    }
    if (options.load_lr_scheduler_states && scheduler_ && meta.at("lr_scheduler").is_object()) {
      scheduler_->set_last_batch_iteration(
          meta.at("lr_scheduler").at("last_batch_iteration").get<int64_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("'{}' lacks a field or has one of the wrong type ({}); the "
                            "checkpoint is damaged or from another version",
                            meta_path, e.what());
  }
  return Status::ok();
}

}  // namespace zt
