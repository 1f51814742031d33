// `zt train --model alexnet`: image classification on CIFAR-10's binary files, the job of
// DeepSpeed's pipeline-parallelism tutorial. The same engine, config, launcher, pipeline engine,
// checkpoints and monitors as language-model training (cmd_train.cc); what differs is the data -
// images and labels from data/cifar.h, each data-parallel rank reading its share in
// torch.utils.data.DistributedSampler's order - and the report (accuracy on --eval-data).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "commands.h"
#include "progress.h"
#include "train_support.h"
#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/core/log.h"
#include "zt/data/cifar.h"
#include "zt/launcher/heartbeat.h"
#include "zt/nn/models/alexnet.h"
#include "zt/pipe/pipe_engine.h"
#include "zt/runtime/engine.h"
#include "zt/tools/monitor.h"

namespace zt::cli {
namespace {

// The flags of `zt train` that image training reads; any other is refused by name.
constexpr const char* kVisionFlags[] = {
    "--config", "--deepspeed_config", "--model", "--data", "--steps", "--device", "--seed",
    "--order", "--metrics-out", "--gradient-checkpointing", "--activation-checkpoint-interval",
    "--eval-data", "--eval-interval",
    "--eval-steps", "--save", "--save-interval", "--keep-last", "--save-on-signal", "--load",
    "--load-tag", "--load-module-only", "--no-load-optimizer-states",
    "--no-load-lr-scheduler-states", "--on-write-error", "--pipeline-parallel-size",
    "--partition-method"};

// Micro-batch m (counted from the start of training) of one data-parallel rank: the rank's
// DistributedSampler indices of epoch m / per_epoch (set_epoch each epoch, as a torch training
// loop does), batch m % per_epoch of them. The last short batch of an epoch is dropped
// (DataLoader drop_last): a pipeline sends every micro-batch's activations at one shape.
class CifarBatches {
 public:
  CifarBatches(const CifarDataset& data, DistributedSamplerOptions sampler, int64_t micro_batch)
      : data_(data), sampler_(sampler), micro_batch_(micro_batch) {}

  Status init() {
    ZT_ASSIGN_OR_RETURN(auto first, distributed_sampler_indices(data_.size(), 0, sampler_));
    per_epoch_ = loader_num_batches(static_cast<int64_t>(first.size()), micro_batch_,
                                    LastBatch::kDrop);
    if (per_epoch_ == 0) {
      return invalid_argument(
          "{} images give each of {} data-parallel ranks {} images, fewer than one micro-batch "
          "of {} (train_micro_batch_size_per_gpu)",
          data_.size(), sampler_.world_size, first.size(), micro_batch_);
    }
    return Status::ok();
  }
  int64_t per_epoch() const { return per_epoch_; }

  Result<CifarBatch> at(int64_t m) {
    const int64_t epoch = m / per_epoch_;
    if (epoch != epoch_) {
      ZT_ASSIGN_OR_RETURN(order_, distributed_sampler_indices(data_.size(), epoch, sampler_));
      epoch_ = epoch;
    }
    const int64_t b = m % per_epoch_;
    return data_.batch(std::span<const int64_t>(order_).subspan(
                           static_cast<size_t>(b * micro_batch_), static_cast<size_t>(micro_batch_)),
                       kCifarNormalizeImagenet);
  }

 private:
  const CifarDataset& data_;
  DistributedSamplerOptions sampler_;
  int64_t micro_batch_;
  int64_t per_epoch_ = 0;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

struct Accuracy {
  double loss = 0;
  int64_t correct = 0, images = 0;
};

// Loss and top-1 accuracy over the first `max_images` images of `data` (all with 0), in batches
// of `batch`, with the engine's evaluation context (ZeRO-3 gathers through its hooks).
Result<Accuracy> evaluate(nn::Model& model, Engine& engine, const CifarDataset& data,
                          int64_t batch, int64_t max_images) {
  Accuracy acc;
  const int64_t n = max_images > 0 ? std::min(max_images, data.size()) : data.size();
  const int64_t classes = static_cast<const nn::AlexNet&>(model).config().num_classes;
  std::vector<int64_t> idx;
  for (int64_t lo = 0; lo < n; lo += batch) {
    idx.clear();
    for (int64_t i = lo; i < std::min(n, lo + batch); ++i) idx.push_back(i);
    CifarBatch b = data.batch(idx, kCifarNormalizeImagenet);
    nn::Context ctx = engine.eval_context();
    Tensor images = b.images.to(ctx.device, ctx.stream);
    Tensor logits = model.forward(ctx, images, engine.hooks());
    std::vector<double> l = logits.to_doubles();  // (rows, classes), synchronising
    const int32_t* labels = b.labels.data<int32_t>();
    for (size_t r = 0; r < idx.size(); ++r) {
      const double* row = l.data() + r * static_cast<size_t>(classes);
      int64_t best = 0;
      double mx = row[0];
      for (int64_t c = 1; c < classes; ++c) {
        if (row[c] > mx) {
          mx = row[c];
          best = c;
        }
      }
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - mx);
      acc.loss += std::log(sum) + mx - row[labels[r]];
      acc.correct += best == labels[r] ? 1 : 0;
      ++acc.images;
    }
  }
  if (acc.images > 0) acc.loss /= static_cast<double>(acc.images);
  return acc;
}

}  // namespace

int cmd_train_vision(const ParsedArgs& a, const std::vector<std::string>& data_values) {
  for (const auto& [flag, value] : a.values) {
    bool known = false;
    for (const char* f : kVisionFlags) known = known || flag == f;
    if (!known) {
      return fail(invalid_argument(
          "{} does not apply to --model {} (image classification; docs/parallelism.md "
          "\"AlexNet\" lists its flags)",
          flag, *a.get("--model")));
    }
  }
  auto config_path = a.get("--config");
  if (!config_path) config_path = a.get("--deepspeed_config");
  auto int_flag = [&](const char* flag, int64_t def, int64_t min) -> Result<int64_t> {
    auto v = a.get(flag);
    if (!v) return def;
    return parse_int(flag, *v, min);
  };
  auto steps = int_flag("--steps", 200, 1);
  if (!steps) return fail(steps.status());
  auto seed = int_flag("--seed", 1234, 0);
  if (!seed) return fail(seed.status());
  auto pipe_size = int_flag("--pipeline-parallel-size", 1, 1);
  if (!pipe_size) return fail(pipe_size.status());
  const int pipe = static_cast<int>(*pipe_size);
  auto eval_interval = int_flag("--eval-interval", 100, 1);
  if (!eval_interval) return fail(eval_interval.status());
  auto eval_steps = int_flag("--eval-steps", 0, 1);
  if (!eval_steps) return fail(eval_steps.status());
  if (a.has("--partition-method") && pipe == 1) {
    return fail(invalid_argument("--partition-method needs --pipeline-parallel-size P above 1"));
  }
  if (pipe > 1 && a.has("--eval-data")) {
    return fail(invalid_argument(
        "--eval-data does not work with --pipeline-parallel-size yet (each stage holds part of "
        "the network); evaluate a saved checkpoint on one process"));
  }
  if (data_values.size() != 1) {
    return fail(invalid_argument(
        "--model {} trains on CIFAR-10's binary files: give --data DIR (cifar-10-batches-bin, or "
        "the folder holding it) or --data FILE.bin",
        *a.get("--model")));
  }
  const std::string model_name = *a.get("--model");
  auto model_r = nn::vision_model_named(model_name);
  if (!model_r) return fail(model_r.status());
  nn::AlexNet& model = **model_r;

  auto env = dist_env_from_environment();
  if (!env) return fail(env.status());
  const int rank = env->rank, world = env->world_size;
  if (world > 1) set_log_rank(rank);
  auto topology = pipe::topology_for_world(world, {.pipeline = pipe, .tensor = 1});
  if (!topology) return fail(topology.status());
  const int data_world = topology->dim(pipe::kAxisData);
  const int data_rank = topology->coord_of(rank, pipe::kAxisData);
  auto device_r = train_device(a, env->local_rank);
  if (!device_r) return fail(device_r.status());
  const Device device = *device_r;
  auto cfg = config_load(*config_path, data_world);
  if (!cfg) return fail(cfg.status());
  auto comm = communicator_create(*env, device);
  if (!comm) return fail(comm.status());

  // Data.
  auto train = CifarDataset::open(data_values[0], CifarSplit::kTrain);
  if (!train) return fail(train.status());
  std::optional<CifarDataset> test;
  if (auto e = a.get("--eval-data")) {
    auto t = CifarDataset::open(*e, CifarSplit::kTest);
    if (!t) return fail(t.status().with_context("--eval-data"));
    test.emplace(std::move(t).value());
  }
  DistributedSamplerOptions so{.seed = static_cast<uint64_t>(*seed),
                               .rank = data_rank,
                               .world_size = data_world};
  if (auto o = a.get("--order")) {
    if (*o == "sequential") {
      so.order = SampleOrder::kSequential;
    } else if (*o != "random") {
      return fail(invalid_argument("--order must be random or sequential, got '{}'", *o));
    }
  }
  CifarBatches batches(*train, so, cfg->train_micro_batch_size_per_gpu);
  if (Status s = batches.init(); !s.is_ok()) return fail(s);
  if (rank == 0) {
    ZT_LOG_INFO("cifar-10: {} training images from {} ({}), {} micro-batches of {} per epoch "
                "per data-parallel rank{}",
                train->size(), data_values[0], train->files().size() == 1 ? "1 file"
                                                    : fmt::format("{} files", train->files().size()),
                batches.per_epoch(), cfg->train_micro_batch_size_per_gpu,
                test ? fmt::format("; {} test images from {}", test->size(), *a.get("--eval-data"))
                     : std::string());
  }

  // Engine: one, or a pipeline of `pipe` stages.
  EngineOptions engine_options{
      .device = device, .seed = static_cast<uint64_t>(*seed), .comm = comm->get()};
  if (Status s = checkpoint_flags(a, engine_options); !s.is_ok()) return fail(s);
  std::unique_ptr<Engine> single_engine;
  std::unique_ptr<pipe::PipelineEngine> pipeline;
  if (pipe > 1) {
    const pipe::ModelFactory factory =
        [&](const pipe::ModelShard&) -> Result<std::unique_ptr<nn::Model>> {
      ZT_ASSIGN_OR_RETURN(auto m, nn::vision_model_named(model_name));
      return std::unique_ptr<nn::Model>(std::move(m));
    };
    auto p = pipe::PipelineEngine::create(
        factory, *cfg,
        {.stages = pipe,
         .partition_method =
             a.get("--partition-method").value_or(std::string(pipe::kDefaultPartitionMethod)),
         .engine = engine_options});
    if (!p) return fail(p.status());
    pipeline = std::move(p).value();
  } else {
    auto e = initialize(model, *cfg, engine_options);
    if (!e) return fail(e.status());
    single_engine = std::move(e).value();
  }
  Engine& engine = pipeline ? pipeline->engine() : *single_engine;

  // Checkpoints.
  auto sf = save_flags(a);
  if (!sf) return fail(sf.status());
  const std::optional<std::string> save_dir = sf->dir;
  const int64_t save_interval = sf->interval, keep_last = sf->keep_last;
  const bool save_on_signal = sf->on_signal;
  auto load_options = load_flags(a);
  if (!load_options) return fail(load_options.status());
  auto write_policy = write_error_policy(a.get("--on-write-error").value_or("fail"));
  if (!write_policy) return fail(write_policy.status());
  const nlohmann::json data_state = {{"path", data_values[0]},
                                     {"seed", *seed},
                                     {"order", so.order == SampleOrder::kRandom ? "random"
                                                                                : "sequential"},
                                     {"model", model_name},
                                     {"task", "image-classification"}};
  if (auto load_dir = a.get("--load")) {
    auto loaded = engine.load_checkpoint(*load_dir, *load_options);
    if (!loaded) return fail(loaded.status());
  }
  // The data continues at the micro-batch after the last one trained (a pure function of the
  // seed and the micro-batch number): images seen / (micro batch x data ranks).
  const int64_t images_per_micro = cfg->train_micro_batch_size_per_gpu * data_world;
  int64_t micro = (engine.global_samples() + images_per_micro - 1) / images_per_micro;
  const int64_t start_step = engine.global_steps();

  MetricsWriter metrics(*write_policy);
  if (auto m = a.get("--metrics-out"); m && rank == 0) {
    if (Status s = metrics.open(*m); !s.is_ok()) return fail(s);
    const nlohmann::json rr = {{"record", "run"},
                               {"model", model_name},
                               {"params", model.num_params()},
                               {"world_size", data_world},
                               {"pipeline_parallel_size", pipe},
                               {"train_batch_size", cfg->train_batch_size},
                               {"train_micro_batch_size_per_gpu",
                                cfg->train_micro_batch_size_per_gpu},
                               {"gradient_accumulation_steps", cfg->gradient_accumulation_steps},
                               {"dtype", std::string(dtype_name(cfg->compute_dtype()))},
                               {"device", device.str()},
                               {"zero_stage", cfg->zero.stage},
                               {"data", data_values[0]}};
    if (Status s = metrics.write(rr); !s.is_ok()) return fail(s);
  }
  if (save_on_signal) signal_save_install();
  std::vector<std::unique_ptr<tools::Monitor>> monitors;
  if (rank == 0) {
    auto m = tools::monitors_from_config(cfg->blocks);
    if (!m) return fail(m.status());
    monitors = std::move(m).value();
  }
  const auto record = [&](const nlohmann::json& rec) -> Status {
    return record_metrics(metrics, monitors, rec, engine.global_samples());
  };
  const nlohmann::json client_state = {{"data", data_state}};
  int64_t saved_at = -1;
  auto save = [&]() -> Status {
    saved_at = engine.global_steps();
    ZT_RETURN_IF_ERROR(engine.save_checkpoint(*save_dir, "", client_state));
    if (keep_last > 0 && rank == 0) return ckpt::tags_prune(*save_dir, static_cast<int>(keep_last));
    return Status::ok();
  };
  if (rank == 0) {
    ZT_LOG_INFO("training {} ({:.2f}M parameters) on {} rank(s){} for {} steps{}: batch {} = "
                "micro {} x accum {} x ranks {}, {}, ZeRO stage {}",
                model_name, model.num_params() / 1e6, world,
                pipeline ? fmt::format(" as {}", pipeline->topology().describe()) : std::string(),
                *steps, start_step > 0 ? fmt::format(" (from step {})", start_step) : std::string(),
                cfg->train_batch_size, cfg->train_micro_batch_size_per_gpu,
                cfg->gradient_accumulation_steps, data_world, dtype_name(cfg->compute_dtype()),
                cfg->zero.stage);
  }
  ProgressBar bar(*steps, rank == 0, "img/s");
  double first_loss = -1, last_loss = 0;
  auto stop = [&](const Status& s) {
    bar.finish();
    return fail(s);
  };
  for (int64_t step = start_step; step < *steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    if (pipeline) {
      auto loss = pipeline->train_batch([&]() -> Result<pipe::MicroBatch> {
        ZT_ASSIGN_OR_RETURN(CifarBatch b, batches.at(micro++));
        return pipe::MicroBatch{.tokens = b.images, .targets = b.labels};
      });
      if (!loss) return stop(loss.status());
    } else {
      for (int64_t m = 0; m < cfg->gradient_accumulation_steps; ++m) {
        auto b = batches.at(micro++);
        if (!b) return stop(b.status());
        auto loss = engine.forward(b->images, b->labels);
        if (!loss) return stop(loss.status());
        if (Status s = engine.backward(*loss); !s.is_ok()) return stop(s);
        if (Status s = engine.step(); !s.is_ok()) return stop(s);
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StepStats& st = *engine.last_step();
    const double ips = static_cast<double>(cfg->train_batch_size) / std::max(secs, 1e-9);
    if (first_loss < 0) first_loss = st.loss;
    last_loss = st.loss;
    bar.update(st.step, st.loss, st.lr, ips, st.skipped);
    launcher::heartbeat_set_step(st.step);
    nlohmann::json r = {{"step", st.step},         {"loss", st.loss},
                        {"lr", st.lr},             {"loss_scale", st.loss_scale},
                        {"grad_norm", st.grad_norm}, {"skipped", st.skipped},
                        {"images_per_s", ips},     {"samples", st.samples}};
    for (const auto& [name, ms] : st.elapsed_ms) r["elapsed_time_ms_" + name] = ms;
    if (Status s = record(r); !s.is_ok()) return stop(s);
    if (test && (st.step % *eval_interval == 0 || st.step == *steps)) {
      auto ev = evaluate(model, engine, *test, cfg->train_micro_batch_size_per_gpu,
                         *eval_steps * cfg->train_micro_batch_size_per_gpu);
      if (!ev) return stop(ev.status());
      const double accuracy = static_cast<double>(ev->correct) / std::max<int64_t>(ev->images, 1);
      if (rank == 0) {
        ZT_LOG_INFO("step {}: eval loss {:.4f}, accuracy {:.4f} over {} images of {}", st.step,
                    ev->loss, accuracy, ev->images, *a.get("--eval-data"));
      }
      if (Status s = record({{"step", st.step},
                             {"eval_loss", ev->loss},
                             {"eval_accuracy", accuracy},
                             {"eval_images", ev->images}});
          !s.is_ok()) {
        return stop(s);
      }
    }
    if (save_dir && save_interval > 0 && st.step % save_interval == 0 && st.step < *steps) {
      if (Status s = save(); !s.is_ok()) return stop(s);
    }
    if (save_on_signal) {
      auto sig = signal_save_requested(engine);
      if (!sig) return stop(sig.status());
      if (*sig) {
        bar.finish();
        if (rank == 0) ZT_LOG_INFO("signal received: saving at step {} and stopping", st.step);
        if (saved_at != engine.global_steps()) {
          if (Status s = save(); !s.is_ok()) return fail(s);
        }
        if (Status s = metrics.close(); !s.is_ok()) return fail(s);
        return 0;
      }
    }
  }
  bar.finish();
  if (save_dir && saved_at != engine.global_steps()) {
    if (Status s = save(); !s.is_ok()) return fail(s);
  }
  if (Status s = metrics.close(); !s.is_ok()) return fail(s);
  if (rank == 0) {
    std::printf("trained %lld steps: loss %.4f -> %.4f (ln(classes) = %.4f)\n",
                static_cast<long long>(*steps), first_loss, last_loss,
                std::log(static_cast<double>(model.config().num_classes)));
  }
  return 0;
}

}  // namespace zt::cli
