#include "zt/zero/zero_state.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "zt/checkpoint/flat_layout.h"
#include "zt/core/log.h"
#include "zt/kernels/ops.h"
#include "zt/zero/optimizer_offload.h"
#include "zt/zero/optimizer_swap.h"

namespace zt::zero {

struct ZeroState::ParamStage {
  SwapBuffer buf;
  std::unique_ptr<Event> copied;  // the last copy out of (or into) buf finished
  bool reading = false;           // a prefetch's read into buf is pending
};

void round_into(Tensor& dst, const Tensor& src, DType round, const Stream& s) {
  if (round == dst.dtype() || round == DType::f32) {
    kernels::cast(dst, src, s);
    return;
  }
  Tensor tmp = Tensor::empty(src.shape(), round, src.device(), s);
  kernels::cast(tmp, src, s);
  kernels::cast(dst, tmp, s);
}

namespace {

int64_t param_count(const std::vector<int64_t>& unit_numels) {
  int64_t params = 0;
  for (int64_t n : unit_numels) params += n;
  return params;
}

// "48.75B", "124.4M": how the fit errors name a model's size.
std::string param_count_text(const std::vector<int64_t>& unit_numels) {
  const int64_t params = param_count(unit_numels);
  return params >= 1000000000 ? fmt::format("{:.2f}B", params / 1e9)
         : params >= 1000000  ? fmt::format("{:.1f}M", params / 1e6)
                              : fmt::format("{}", params);
}

}  // namespace

namespace {

// Elements [lo, hi) of a tensor-parallel part of `p` (Param::slice): the whole parameter's file
// ranges, or its normal draws (each block of `block` elements from its own generator, drawn
// from the block's start exactly as the whole parameter's are, the elements between the part's
// runs dropped), or its constant.
void init_slice(const nn::Param& p, int64_t lo, int64_t hi, float* dst, uint64_t seed,
                int64_t block) {
  const auto runs = nn::slice_runs(*p.slice, lo, hi);
  if (p.source != nullptr) {
    for (const auto& [a, b] : runs) {
      p.source->read(a, b, dst);
      dst += b - a;
    }
    return;
  }
  if (p.init != nn::ParamInit::kNormal) {
    std::fill(dst, dst + (hi - lo), p.init == nn::ParamInit::kOnes ? 1.0f : 0.0f);
    return;
  }
  const uint64_t name_seed = seed ^ std::hash<std::string>{}(p.name);
  int64_t cur = -1, pos = 0;  // the block the generator is in, and the next element it draws
  std::mt19937_64 rng;
  std::normal_distribution<float> dist(0.0f, p.init_std);
  for (const auto& [a, b] : runs) {
    for (int64_t j = a; j < b; ++j) {
      if (j / block != cur || j < pos) {  // a fresh block: its generator from the start
        cur = j / block;
        rng.seed(name_seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(cur));
        dist = std::normal_distribution<float>(0.0f, p.init_std);
        pos = cur * block;
      }
      while (pos < j) {
        (void)dist(rng);
        ++pos;
      }
      *dst++ = dist(rng);
      ++pos;
    }
  }
}

}  // namespace

void init_unit_params(nn::Unit& unit, float* out, uint64_t seed) {
  init_unit_params(unit, out, seed, 0, unit.flat_numel());
}

void init_unit_params(nn::Unit& unit, float* out, uint64_t seed, int64_t begin, int64_t end) {
  // Zero first (padding and the gaps between aligned parameters stay zero), over all threads for
  // a large unit.
  constexpr int64_t kZeroSlice = int64_t{1} << 20;
  const int64_t count = end - begin;
#pragma omp parallel for schedule(static) if (count > 4 * kZeroSlice)
  for (int64_t z = 0; z < count; z += kZeroSlice) {
    std::fill(out + z, out + std::min(count, z + kZeroSlice), 0.0f);
  }
  // Normal parameters are drawn in blocks of kInitBlock elements, block k of parameter `name` from
  // its own generator seeded by (seed, name, k): the values depend on nothing but those, so they
  // are the same for any world size, stage or device or thread count, the blocks of a large
  // model fill in parallel, and a rank that needs only its own chunk (stage 3) draws only the
  // blocks that overlap it.
  constexpr int64_t kInitBlock = int64_t{1} << 20;
  struct Block {
    const nn::Param* param;
    int64_t begin, end;  // elements of the parameter the block covers
    uint64_t seed;
  };
  // Flat element e of the unit lands in out[e - begin].
  auto at = [&](const nn::Param* p, int64_t j) { return out + (p->offset + j - begin); };
  std::vector<Block> blocks;
  for (nn::Param* p : unit.params()) {
    // This parameter's elements inside [begin, end).
    const int64_t lo = std::max<int64_t>(0, begin - p->offset);
    const int64_t hi = std::min<int64_t>(p->numel(), end - p->offset);
    if (lo >= hi) continue;
    if (p->slice) {  // a tensor-parallel part: the whole parameter's values at its elements
      init_slice(*p, lo, hi, at(p, lo), seed, kInitBlock);
      continue;
    }
    if (p->source != nullptr) {  // from the model's weight files, only the range asked for
      p->source->read(lo, hi, at(p, lo));
      continue;
    }
    switch (p->init) {
      case nn::ParamInit::kZeros:
        std::fill(at(p, lo), at(p, hi), 0.0f);
        break;
      case nn::ParamInit::kOnes:
        std::fill(at(p, lo), at(p, hi), 1.0f);
        break;
      case nn::ParamInit::kNormal: {
        const uint64_t name_seed = seed ^ std::hash<std::string>{}(p->name);
        for (int64_t b = lo / kInitBlock * kInitBlock; b < hi; b += kInitBlock) {
          blocks.push_back(
              {p, b, std::min(p->numel(), b + kInitBlock),
               name_seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(b / kInitBlock)});
        }
        break;
      }
    }
  }
#pragma omp parallel for schedule(dynamic) if (blocks.size() > 1)
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    std::mt19937_64 rng(b.seed);
    std::normal_distribution<float> dist(0.0f, b.param->init_std);
    // A block is one sequence from its start: values before `begin` are drawn and dropped.
    const int64_t stop = std::min(b.end, end - b.param->offset);
    const int64_t first = std::max(b.begin, begin - b.param->offset);
    for (int64_t j = b.begin; j < stop; ++j) {
      const float x = dist(rng);
      if (j >= first) *at(b.param, j) = x;
    }
  }
}

UnitLayout unit_layout(int64_t numel, int world, int rank, const ZeroOptions& options) {
  const ckpt::FlatChunk c = ckpt::flat_chunk(numel, world, rank);
  UnitLayout l;
  l.padded = c.padded;
  l.shard = c.shard;
  l.shard_offset = c.begin;
  l.persistent = options.stage < 3 || l.padded <= options.persistence_threshold;
  return l;
}

bool offloaded(const ZeroOptions& o) {
  return o.optimizer_placement != OptimizerPlacement::kDevice;
}

bool master_shared(const ZeroOptions& o) {
  return !offloaded(o) && o.round_dtype == DType::f32 && o.compute_dtype == DType::f32;
}

bool shard_from_master(const ZeroOptions& o, const UnitLayout& l) {
  return !l.persistent && o.device.is_cuda() && !master_shared(o) && !offloaded(o) &&
         o.round_dtype == o.compute_dtype;
}

int64_t offload_piece_step(const ZeroOptions& o, int64_t shard) {
  if (o.offload_granularity == OffloadGranularity::kParamTensors) return shard;
  ZT_ASSERT(o.offload_piece_elements > 0, "offload_piece_elements {} must be positive",
            o.offload_piece_elements);
  return o.offload_piece_elements;
}

bool shard_offloaded(const ZeroOptions& o, const UnitLayout& l) {
  if (l.persistent || o.stage != 3 || !offloaded(o)) return false;
  switch (o.param_placement) {
    case ParamPlacement::kDevice:
      return false;
    case ParamPlacement::kHostPinned:
    case ParamPlacement::kHostPageable:
      return o.device.is_cuda();  // a CPU engine's chunks are in host memory already
    case ParamPlacement::kNvme:
      return true;
  }
  return false;
}

namespace {

// Bytes of a unit's own chunk in the parameter swap file (padded for O_DIRECT).
int64_t param_block_bytes(const ZeroOptions& o, int64_t shard) {
  return aio::align_up(shard * static_cast<int64_t>(dtype_size(o.compute_dtype)));
}

}  // namespace

ModelStateBytes predict_state_bytes(const std::vector<int64_t>& unit_numels,
                                    const ZeroOptions& options, int world,
                                    const std::vector<bool>& frozen) {
  const auto compute = static_cast<int64_t>(dtype_size(options.compute_dtype));
  const auto acc = static_cast<int64_t>(dtype_size(kernels::accum_dtype(options.compute_dtype)));
  const int64_t f32 = 4;
  ModelStateBytes b;
  for (size_t i = 0; i < unit_numels.size(); ++i) {
    const UnitLayout l = unit_layout(unit_numels[i], world, 0, options);
    const bool is_frozen = i < frozen.size() && frozen[i];
    if (l.persistent) {
      b.params += l.padded * compute;
    } else if (shard_offloaded(options, l)) {
      if (options.param_placement == ParamPlacement::kNvme) {
        b.nvme += param_block_bytes(options, l.shard);
      } else {
        b.host_params += l.shard * compute;
      }
    } else if (is_frozen || !shard_from_master(options, l)) {
      b.params += l.shard * compute;
    }
    if (is_frozen) continue;
    if (options.stage <= 1) b.grads += l.padded * acc;
    if (options.stage >= 1) b.grads += l.shard * f32;
    const int64_t master_elems = options.stage == 0 ? l.padded : l.shard;
    if (options.optimizer_placement == OptimizerPlacement::kNvme) continue;  // below
    if (!master_shared(options)) {
      (offloaded(options) ? b.host_master : b.master) += master_elems * f32;
    }
    (offloaded(options) ? b.host_optimizer : b.optimizer) +=
        options.optimizer_states * master_elems * f32;
  }
  if (options.optimizer_placement == OptimizerPlacement::kNvme) {
    // The swap file holds every piece's master and state blocks, each padded for O_DIRECT.
    int64_t pieces = 0;
    for (size_t i = 0; i < unit_numels.size(); ++i) {
      if (i < frozen.size() && frozen[i]) continue;
      const int64_t shard = unit_layout(unit_numels[i], world, 0, options).shard;
      const int64_t step = offload_piece_step(options, shard);
      for (int64_t off = 0; off < shard; off += step) {
        pieces += (1 + options.optimizer_states) * swap_block_bytes(std::min(step, shard - off));
      }
    }
    b.nvme += std::max<int64_t>(pieces, aio::kAlign);
  }
  return b;
}

std::string model_state_fit_error(const std::vector<int64_t>& unit_numels,
                                  const ZeroOptions& options, int world, int64_t device_bytes,
                                  const std::string& device_name,
                                  const std::vector<bool>& frozen) {
  const ModelStateBytes need = predict_state_bytes(unit_numels, options, world, frozen);
  if (device_bytes <= 0 || need.total() <= device_bytes) return "";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::string count = param_count_text(unit_numels);
  ZeroOptions s3 = options;
  s3.stage = 3;
  const ModelStateBytes at3 = predict_state_bytes(unit_numels, s3, world, frozen);
  s3.optimizer_placement = OptimizerPlacement::kHostPinned;
  const ModelStateBytes at3off = predict_state_bytes(unit_numels, s3, world, frozen);
  std::string instead;
  if (options.stage < 3)
    instead += fmt::format("ZeRO stage 3 needs {:.1f} GiB, ", at3.total() / kGiB);
  if (!offloaded(options)) {
    instead += fmt::format(
        "stage 3 with offload_optimizer {{\"device\": \"cpu\"}} {:.1f} GiB (and {:.1f} GiB of "
        "host memory per rank), ",
        at3off.total() / kGiB, at3off.host_total() / kGiB);
  }
  return fmt::format(
      "the model state alone needs {:.1f} GiB per GPU at ZeRO stage {}{} on {} rank(s) ({} "
      "parameters: compute copy {:.1f} GiB, gradients {:.1f}, fp32 master {:.1f}, optimizer "
      "state {:.1f}), more than {}'s {:.1f} GiB in all; {}or use more GPUs",
      need.total() / kGiB, options.stage, offloaded(options) ? " with offload_optimizer" : "",
      world, count, need.params / kGiB, need.grads / kGiB, need.master / kGiB,
      need.optimizer / kGiB, device_name, device_bytes / kGiB, instead);
}

std::string host_state_fit_error(const std::vector<int64_t>& unit_numels,
                                 const ZeroOptions& options, int world, int ranks_on_host,
                                 int64_t available_bytes, const std::vector<bool>& frozen) {
  if (!offloaded(options) || available_bytes <= 0) return "";
  const ModelStateBytes need = predict_state_bytes(unit_numels, options, world, frozen);
  const double on_host = static_cast<double>(need.host_total()) * ranks_on_host;
  if (on_host <= static_cast<double>(available_bytes)) return "";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double per_param = static_cast<double>(need.host_total()) * world /
                           static_cast<double>(std::max<int64_t>(1, param_count(unit_numels)));
  return fmt::format(
      "offload_optimizer keeps {:.1f} GiB of {} host memory per rank ({} parameters at {:.0f} "
      "bytes each, split over {} rank(s): fp32 master {:.1f} GiB, optimizer state {:.1f}), {:.1f} "
      "GiB "
      "for the {} rank(s) on this host, more than the {:.1f} GiB available to this process; "
      "run fewer ranks per host (more nodes), free host memory, or raise the job's memory limit",
      need.host_total() / kGiB,
      options.optimizer_placement == OptimizerPlacement::kHostPinned ? "page-locked" : "pageable",
      param_count_text(unit_numels), per_param, world, need.host_master / kGiB,
      need.host_optimizer / kGiB, on_host / kGiB, ranks_on_host, available_bytes / kGiB);
}

ZeroState::ZeroState(nn::Model& model, const ZeroOptions& options, uint64_t seed)
    : model_(model),
      options_(options),
      lane_(options.device, options.stream, options.overlap),
      bucket_(options.reduce_bucket_elements),
      gather_spans_(options.device) {
  ZT_ASSERT(options.comm != nullptr, "ZeroState needs a communicator");
  ZT_ASSERT(options.stage >= 0 && options.stage <= 3, "stage {}", options.stage);
  const Device dev = options.device;
  const Stream& s = options.stream;
  const int W = world_size();
  const DType acc = kernels::accum_dtype(options.compute_dtype);
  const int stage = options.stage;
  ZT_ASSERT(!offloaded() || stage >= 1, "offload_optimizer needs ZeRO stage 1-3, not {}", stage);
  // Offloaded state: a fresh host tensor, page-locked when asked (the GPU copies to and from it).
  // Start-up can take minutes for large models (drawing billions of initial values, pinning
  // tens of GiB): rank 0 says how far it is every 15 s, and what took the time at the end.
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const Clock::time_point start = Clock::now();
  Clock::time_point reported = start;
  double draw_s = 0;
  double host_s = 0;
  int64_t host_bytes = 0;
  auto host_buffer = [&](const Shape& shape) {
    const Clock::time_point t0 = Clock::now();
    Tensor t = options.optimizer_placement == OptimizerPlacement::kHostPinned
                   ? Tensor::empty_pinned(shape, DType::f32)
                   : Tensor::empty(shape, DType::f32, Device::cpu());
    t.zero();
    host_s += since(t0);
    host_bytes += static_cast<int64_t>(t.nbytes());
    return t;
  };
  const size_t unit_count = model.units().size();
  // What this rank draws, holds and copies: the whole unit at stage 0 (its fp32 master is whole)
  // or with one rank; otherwise only its own chunk.
  const bool whole = stage == 0 || W == 1;
  // One host buffer for every unit's initial values, the size of the largest: a fresh one per
  // unit would have its pages faulted in (and zeroed by the kernel) again for every unit.
  int64_t scratch_elements = 0;
  for (auto& unit : model.units()) {
    const UnitLayout l = unit_layout(unit->flat_numel(), W, rank(), options);
    scratch_elements = std::max(scratch_elements, whole ? l.padded : l.shard);
  }
  const Tensor scratch = Tensor::empty({scratch_elements}, DType::f32, Device::cpu());
  const bool swapped = options.optimizer_placement == OptimizerPlacement::kNvme;
  if (swapped) {
    // ZeRO-Infinity: the swap file is laid out over the step's pieces before any value exists;
    // each unit's initial master values (and zeroed state) go to it below.
    swap_pieces_ = plan_offload_pieces(model, options, W, rank());
    auto sw = OptimizerSwap::create(optimizer_swap_path(options.nvme_folder, stage, rank()),
                                    swap_pieces_, 1 + options.optimizer_states, options.aio,
                                    dev.is_cuda());
    if (!sw.is_ok()) throw std::runtime_error(sw.status().message());
    swap_ = std::move(sw).value();
  }
  // offload_param nvme: each sharded unit's own chunk gets a block of the parameter swap file.
  int64_t param_file_bytes = 0;
  int64_t largest_param_block = 0;
  for (auto& unit : model.units()) {
    const UnitLayout l = unit_layout(unit->flat_numel(), W, rank(), options);
    if (options.param_placement == ParamPlacement::kNvme && shard_offloaded(options, l)) {
      param_file_bytes += param_block_bytes(options, l.shard);
      largest_param_block = std::max(largest_param_block, param_block_bytes(options, l.shard));
    }
  }
  if (param_file_bytes > 0) {
    const std::string folder =
        fmt::format("{}/zero_stage_3/{}params/rank{}", options.param_nvme_folder,
                    dtype_name(options.compute_dtype), rank());
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (ec) {
      throw std::runtime_error(fmt::format(
          "cannot create the parameter swap folder '{}': {}; check that "
          "zero_optimization.offload_param.nvme_path is writable",
          folder, ec.message()));
    }
    auto f = aio::SwapFile::create(folder + "/params.swp", param_file_bytes, options.aio,
                                   "parameter swap file");
    if (!f.is_ok()) throw std::runtime_error(f.status().message());
    param_file_ = std::move(f).value();
    for (int i = 0; i < std::max(2, options.param_buffer_count); ++i) {
      auto st = std::make_unique<ParamStage>();
      st->buf = SwapBuffer(largest_param_block, dev.is_cuda());
      st->copied = std::make_unique<Event>(dev);
      param_stages_.push_back(std::move(st));
    }
  }
  int64_t param_file_at = 0;
  size_t next_piece = 0;
  int io_slot = 0;
  std::array<aio::Ticket, OptimizerSwap::kSlots> io{};
  std::array<bool, OptimizerSwap::kSlots> io_busy{};
  for (auto& unit : model.units()) {
    UnitState u;
    u.trainable = !unit->frozen();
    u.numel = unit->flat_numel();
    const UnitLayout l = unit_layout(u.numel, W, rank(), options);
    u.padded = l.padded;
    u.shard = l.shard;
    u.shard_offset = l.shard_offset;
    u.persistent = l.persistent;
    // A unit sharded at rest is gathered when it computes; a persistent one (stages 1-2, small
    // units at stage 3) gets its own chunk written here and the others' by one all-gather after
    // the loop, as after every step. Each rank so draws 1/W of the model, and the values are
    // those of the whole draw. Everything below copies out of `host` before the next unit.
    const int64_t host_begin = whole ? 0 : u.shard_offset;
    Tensor host = scratch.view(0, {whole ? u.padded : u.shard});
    const Clock::time_point drawn = Clock::now();
    init_unit_params(*unit, host.data<float>(), seed, host_begin, host_begin + host.numel());
    draw_s += since(drawn);
    Tensor on_dev = dev.is_cpu() ? host : host.to(dev, s);
    Tensor full = whole ? on_dev : Tensor();
    Tensor own = whole ? on_dev.view(u.shard_offset, {u.shard}) : on_dev;
    Tensor host_own = whole ? host.view(u.shard_offset, {u.shard}) : host;
    if (u.persistent) {
      u.value = Tensor::empty({u.padded}, options.compute_dtype, dev, s);
      if (whole) {
        round_into(u.value, full, options.round_dtype, s);
      } else {
        Tensor mine = u.value.view(u.shard_offset, {u.shard});
        round_into(mine, own, options.round_dtype, s);
      }
    } else if (u.trainable && shard_from_master(options, l)) {
      u.shard_from_master = true;
    } else if (shard_offloaded(options, l)) {
      // offload_param: rounded on the device, then to where the chunk rests.
      u.shard_offloaded = true;
      if (options.param_placement == ParamPlacement::kNvme) {
        u.param_file_offset = param_file_at;
        param_file_at += param_block_bytes(options, u.shard);
      }
      Tensor chunk = Tensor::empty({u.shard}, options.compute_dtype, dev, s);
      round_into(chunk, own, options.round_dtype, s);
      const Status placed = place_own_chunk(u, chunk);
      if (!placed.is_ok()) throw std::runtime_error(placed.message());
    } else {
      u.value_shard = Tensor::empty({u.shard}, options.compute_dtype, dev, s);
      round_into(u.value_shard, own, options.round_dtype, s);
    }
    if (!u.trainable) {
      // Frozen: the compute copy is all it keeps.
      unit->bind(u.value, Tensor());
      units_.push_back(std::move(u));
      continue;
    }
    if (master_shared()) {
      u.master = stage == 0
                     ? u.value
                     : (u.persistent ? u.value.view(u.shard_offset, {u.shard}) : u.value_shard);
    } else if (swapped) {
      // This unit's master values and zeroed optimizer state into its pieces of the swap file,
      // through the staging slots in turn (a slot is refilled once its last write is done).
      const int idx = static_cast<int>(units_.size());
      for (; next_piece < swap_pieces_.size() && swap_pieces_[next_piece].unit == idx;
           ++next_piece) {
        const OffloadPiece& p = swap_pieces_[next_piece];
        if (io_busy[io_slot]) {
          const Status w = swap_->wait(io[io_slot]);
          if (!w.is_ok()) throw std::runtime_error(w.message());
        }
        std::copy_n(host_own.data<float>() + p.offset, p.n, swap_->slot_block(io_slot, 0, p.n));
        // The optimizer state starts at zero (and the blocks' padding is written as zeros).
        float* tail = swap_->slot_block(io_slot, 0, p.n) + p.n;
        std::fill(tail, swap_->slot_block(io_slot, swap_->kinds(), p.n), 0.0f);
        io[io_slot] = swap_->write_piece(p, io_slot);
        io_busy[io_slot] = true;
        io_slot = (io_slot + 1) % OptimizerSwap::kSlots;
      }
    } else if (offloaded()) {
      u.master = host_buffer({u.shard});
      u.master.copy_from(host_own);
    } else {
      u.master = (stage == 0 ? full : own).clone(s);
    }
    for (int i = 0; i < options.optimizer_states && !swapped; ++i) {
      u.state.push_back(offloaded() ? host_buffer(u.master.shape())
                                    : Tensor::zeros(u.master.shape(), DType::f32, dev, s));
    }
    if (stage <= 1) u.grad = Tensor::zeros({u.padded}, acc, dev, s);
    if (stage >= 1) u.grad_shard = Tensor::zeros({u.shard}, DType::f32, dev, s);
    unit->bind(u.value, u.grad);
    units_.push_back(std::move(u));
    if (rank() == 0 && since(reported) >= 15) {
      reported = Clock::now();
      ZT_LOG_INFO("zero: start-up: {} of {} units ready after {:.0f} s", units_.size(), unit_count,
                  since(start));
    }
  }
  if (swapped) {
    const Status w = swap_->wait_all();
    if (!w.is_ok()) throw std::runtime_error(w.message());
    if (rank() == 0) {
      ZT_LOG_INFO("zero: optimizer state swapped to {} ({:.1f} GiB per rank; {})", swap_->path(),
                  swap_->file_bytes() / 1073741824.0, swap_->backend_note());
    }
  }
  if (offloaded()) offload_ = std::make_unique<OptimizerOffload>(*this, model);
  // The persistent units' other chunks (their own ones were written above). A failure here is
  // reported by the first pass, as a hook's would be.
  if (stage >= 1 && W > 1) record(publish_params(/*lowp_written=*/true, /*with_frozen=*/true));
  options_.stream.synchronize();
  if (rank() == 0 && since(start) >= 1) {
    ZT_LOG_INFO("zero: start-up took {:.1f} s: drawing this rank's initial values {:.1f} s{}",
                since(start), draw_s,
                offloaded()
                    ? fmt::format(", {} {:.1f} GiB of host memory for the offloaded "
                                  "state {:.1f} s",
                                  options.optimizer_placement == OptimizerPlacement::kHostPinned
                                      ? "page-locking"
                                      : "allocating",
                                  host_bytes / 1073741824.0, host_s)
                    : std::string());
  }
}

ZeroState::~ZeroState() {
  // Collectives still in flight reference our buffers: let them finish (errors were reported).
  for (auto& p : pending_) (void)p.handle.wait();
  for (auto& u : units_) {
    if (u.gather_in_flight) (void)u.pending_gather.wait();
  }
  options_.stream.synchronize();
  if (param_file_ != nullptr) {
    (void)param_file_->wait_all();
    (void)param_file_->remove();  // scratch space, as the optimizer's swap file
  }
}

void ZeroState::record(const Status& s) {
  if (!s.is_ok() && hook_status_.is_ok()) hook_status_ = s;
}

ModelStateBytes ZeroState::state_bytes() const {
  // An absent buffer (no 16-bit chunk at rest, a gradient released after its reduction) holds
  // nothing; an undefined tensor's shape would count one element.
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  ModelStateBytes b;
  for (const auto& u : units_) {
    if (u.shard_offloaded) {
      b.host_params += bytes(u.value_shard);  // (in the swap file: counted below)
    } else {
      b.params += bytes(u.persistent ? u.value : u.value_shard);
    }
    if (options_.stage <= 1) b.grads += bytes(u.grad);
    if (options_.stage >= 1) b.grads += bytes(u.grad_shard);
    int64_t master = master_shared() ? 0 : bytes(u.master);
    int64_t state = 0;
    for (const auto& t : u.state) state += bytes(t);
    (offloaded() ? b.host_master : b.master) += master;
    (offloaded() ? b.host_optimizer : b.optimizer) += state;
  }
  if (offload_) b.host_buffers = offload_->staging_bytes();
  if (swap_) {
    b.host_buffers += swap_->staging_bytes();
    b.nvme = swap_->file_bytes();
  }
  if (param_file_) {
    b.nvme += param_file_->size();
    for (const auto& st : param_stages_) b.host_buffers += st->buf.size();
  }
  return b;
}

Tensor& ZeroState::step_grad(int u) {
  UnitState& st = units_[u];
  if (options_.stage == 0) return st.grad;
  if (st.shard_stale) {  // no reduction wrote it this step: its gradient is zero
    st.grad_shard.zero(options_.stream);
    st.shard_stale = false;
  }
  return st.grad_shard;
}

Tensor ZeroState::own_compute_chunk(int u) {
  UnitState& st = units_[u];
  if (options_.stage == 0) return st.value;
  if (st.persistent) return st.value.view(st.shard_offset, {st.shard});
  return st.value_shard;  // undefined when shard_from_master
}

Status ZeroState::publish_params(bool lowp_written, bool with_frozen) {
  const Stream& s = options_.stream;
  std::vector<CommHandle> handles;
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitState& st = units_[i];
    // Frozen units never change after start-up (a checkpoint load writes every element a rank
    // keeps); at start-up their own chunks were written like the others'.
    if (!st.trainable && !with_frozen) continue;
    Tensor own = own_compute_chunk(static_cast<int>(i));
    if (st.shard_from_master) continue;  // cast from the master when next gathered
    if (st.shard_offloaded) {
      // offload_param: the optimizer wrote the chunk where it rests; a refresh from the master
      // (checkpoint loads) goes through a device copy.
      if (st.trainable && !lowp_written) {
        ZT_ASSIGN_OR_RETURN(Tensor m, master_values(static_cast<int>(i)));
        if (m.device() != options_.device) m = m.to(options_.device, s);
        Tensor chunk = Tensor::empty({st.shard}, options_.compute_dtype, options_.device, s);
        round_into(chunk, m, options_.round_dtype, s);
        ZT_RETURN_IF_ERROR(store_own_chunk(static_cast<int>(i), chunk));
      }
      continue;  // sharded at stage 3: nothing to all-gather
    }
    // (A frozen unit has no master: its chunk is already the compute copy.)
    if (st.trainable && !master_shared() && !lowp_written) {
      // An offloaded master is in host memory (or the swap file): its device copy is rounded
      // (checkpoint loads).
      ZT_ASSIGN_OR_RETURN(Tensor m, master_values(static_cast<int>(i)));
      if (m.device() != options_.device) m = m.to(options_.device, s);
      round_into(own, m, options_.round_dtype, s);
    }
    if (options_.stage >= 1 && st.persistent && world_size() > 1) {
      Tensor send = own.clone(s);
      handles.push_back(options_.comm->all_gather(st.value, send, s));
      if (!options_.device.is_cuda()) ZT_RETURN_IF_ERROR(handles.back().wait());
    }
  }
  for (auto& h : handles) ZT_RETURN_IF_ERROR(h.wait());
  return Status::ok();
}

void ZeroState::zero_grads() {
  std::vector<Tensor> clear;
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitState& u = units_[i];
    if (u.grad.defined()) {
      if (options_.stage <= 1) {
        // Not cleared: the next backward's first op on each parameter writes its gradient (a
        // weight GEMM with beta 0 reads no C), the others clear what they add to, and
        // after_backward clears what no op reached. The gaps between parameters were zeroed at
        // start-up and nothing writes them. The vectors (biases, norms) are cleared below, all
        // units' in one launch.
        model_.units()[i]->mark_grads_unwritten(clear);
      } else {
        u.grad.zero(options_.stream);
      }
    }
    if (u.grad_shard.defined()) u.shard_stale = true;  // the next reduction overwrites it
  }
  if (!clear.empty()) kernels::zero_tensors(clear, options_.device, options_.stream);
}

void ZeroState::abandon_pass() {
  (void)bucket_.take();
  pending_.clear();
  stream_handles_.clear();
  hook_status_ = Status::ok();
  if (options_.stage >= 2) {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (!units_[u].grad.defined()) continue;
      units_[u].grad = Tensor();
      model_.units()[u]->bind_grads(Tensor());
    }
  }
}

void ZeroState::clear_unwritten_grads() {
  for (size_t i = 0; i < units_.size(); ++i) {
    if (!units_[i].grad.defined()) continue;
    units_[i].grad.zero(options_.stream);  // one clear per unit, not one per parameter
    model_.units()[i]->bind_grads(units_[i].grad);
  }
}

Status ZeroState::all_reduce_doubles(std::vector<double>& values, ReduceOp op) {
  if (world_size() == 1 || values.empty()) return Status::ok();
  Tensor t = Tensor::from_doubles(values, {static_cast<int64_t>(values.size())}, DType::f64,
                                  options_.device);
  ZT_RETURN_IF_ERROR(options_.comm->all_reduce(t, op, options_.stream).wait());
  values = t.to_doubles();
  return Status::ok();
}

Result<std::vector<Tensor>> ZeroState::gather_master(std::span<const Tensor> in_place_of_master) {
  std::vector<Tensor> out;
  const Stream& s = options_.stream;
  for (auto& st : units_) {
    if (!st.trainable) {
      // Frozen: the compute copy (whole, or gathered from the chunks) as f32.
      Tensor whole = st.value;
      if (!st.persistent) {
        whole = Tensor::empty({st.padded}, options_.compute_dtype, options_.device, s);
        ZT_ASSIGN_OR_RETURN(Tensor mine, load_own_chunk(static_cast<int>(out.size()), s));
        ZT_RETURN_IF_ERROR(options_.comm->all_gather(whole, mine.clone(s), s).wait());
      }
      Tensor f = Tensor::empty({st.padded}, DType::f32, options_.device, s);
      kernels::cast(f, whole, s);
      out.push_back(f.to(Device::cpu(), s));
      continue;
    }
    const int u = static_cast<int>(out.size());
    Tensor master;
    if (static_cast<size_t>(u) < in_place_of_master.size() && in_place_of_master[u].defined()) {
      master = in_place_of_master[u];
    } else {
      ZT_ASSIGN_OR_RETURN(master, master_values(u));
    }
    if (options_.stage == 0) {
      out.push_back(master.to(Device::cpu(), s));
      continue;
    }
    Tensor full = Tensor::empty({st.padded}, DType::f32, options_.device, s);
    // The communicator works on the training device; offloaded masters are on the host.
    Tensor send = master.device() == options_.device ? master.clone(s)
                                                     : master.to(options_.device, s);
    ZT_RETURN_IF_ERROR(options_.comm->all_gather(full, send, s).wait());
    out.push_back(full.to(Device::cpu(), s));
  }
  return out;
}

Result<Tensor> ZeroState::master_values(int u) {
  UnitState& st = units_[u];
  if (swap_ == nullptr || !st.trainable) return st.master;
  Tensor m = Tensor::empty({st.shard}, DType::f32, Device::cpu());
  ZT_RETURN_IF_ERROR(swap_->read_range(swap_pieces_, u, 0, 0, st.shard, m.data<float>()));
  return m;
}

Status ZeroState::place_own_chunk(UnitState& st, const Tensor& chunk) {
  const Stream& s = options_.stream;
  if (options_.param_placement != ParamPlacement::kNvme) {
    if (!st.value_shard.defined()) {
      st.value_shard = options_.param_placement == ParamPlacement::kHostPinned
                           ? Tensor::empty_pinned({st.shard}, options_.compute_dtype)
                           : Tensor::empty({st.shard}, options_.compute_dtype, Device::cpu());
    }
    st.value_shard.copy_from(chunk, s);
    s.synchronize();
    return Status::ok();
  }
  if (st.param_read_stage >= 0) settle_param_reads();  // a prefetched read of the old values
  ParamStage& stage = *param_stages_[take_param_stage()];
  const size_t bytes = chunk.nbytes();
  memory_copy(stage.buf.data(), Device::cpu(), chunk.data(), chunk.device(), bytes, s);
  const int64_t block = param_block_bytes(options_, st.shard);
  std::memset(stage.buf.data() + bytes, 0, static_cast<size_t>(block) - bytes);
  return param_file_->wait(param_file_->write_async(stage.buf.data(), block, st.param_file_offset));
}

Status ZeroState::store_own_chunk(int u, const Tensor& chunk) {
  UnitState& st = units_[u];
  if (!st.shard_offloaded) {
    own_compute_chunk(u).copy_from(chunk, options_.stream);
    return Status::ok();
  }
  return place_own_chunk(st, chunk);
}

Result<Tensor> ZeroState::load_own_chunk(int u, const Stream& s) {
  UnitState& st = units_[u];
  if (!st.shard_offloaded) return own_compute_chunk(u);
  Tensor t = Tensor::empty({st.shard}, options_.compute_dtype, options_.device, s);
  const size_t bytes = t.nbytes();
  if (options_.param_placement != ParamPlacement::kNvme) {
    memory_copy_async(t.data(), t.device(), st.value_shard.data(), Device::cpu(), bytes, s);
    return t;
  }
  // From the file into a staging buffer (the one a prefetch already read it into, or the next
  // free one), then to the device on `s`; the buffer is free again when the stream passes the
  // copy.
  int k = st.param_read_stage;
  Status read;
  if (k >= 0) {
    st.param_read_stage = -1;
    param_stages_[k]->reading = false;
    read = param_file_->wait(st.param_read_ticket);
  } else {
    k = take_param_stage();
    read = param_file_->wait(param_file_->read_async(
        param_stages_[k]->buf.data(), param_block_bytes(options_, st.shard), st.param_file_offset));
  }
  ZT_RETURN_IF_ERROR(read);
  ParamStage& stage = *param_stages_[k];
  memory_copy_async(t.data(), t.device(), stage.buf.data(), Device::cpu(), bytes, s);
  stage.copied->record(s);
  return t;
}

int ZeroState::take_param_stage() {
  // At most one read per unit is pending and there are at least two buffers, but a ring of
  // buffer_count may hold several prefetches' reads: skip those.
  for (size_t tries = 0; tries < param_stages_.size(); ++tries) {
    const int k = static_cast<int>(next_param_stage_++ % param_stages_.size());
    if (param_stages_[k]->reading) continue;
    param_stages_[k]->copied->synchronize();
    return k;
  }
  settle_param_reads();  // every buffer holds a read nobody took yet: drop them
  return take_param_stage();
}

void ZeroState::start_param_read(int u) {
  UnitState& st = units_[u];
  if (st.param_read_stage >= 0) return;
  const int k = take_param_stage();
  param_stages_[k]->reading = true;
  st.param_read_stage = k;
  st.param_read_ticket = param_file_->read_async(
      param_stages_[k]->buf.data(), param_block_bytes(options_, st.shard), st.param_file_offset);
}

void ZeroState::settle_param_reads() {
  for (auto& st : units_) {
    if (st.param_read_stage < 0) continue;
    record(param_file_->wait(st.param_read_ticket));
    param_stages_[st.param_read_stage]->reading = false;
    st.param_read_stage = -1;
  }
}

// ---- stage 3 parameter gathering

void ZeroState::keep_stream_handle(CommHandle h) {
  stream_handles_.push_back(std::move(h));
  // Passes that never call finish_pass (generation through the hooks) must not pile up handles:
  // past a bound, settle them here.
  if (stream_handles_.size() > 256) {
    for (auto& sh : stream_handles_) record(sh.wait());
    stream_handles_.clear();
  }
}

CommHandle ZeroState::issue_gather(int u, CommDone& done) {
  UnitState& st = units_[u];
  // Allocated on the compute stream, which uses it; lane_.begin() makes the lane wait for the
  // block's earlier users and for the optimizer's last write of value_shard.
  st.value = Tensor::empty({st.padded}, options_.compute_dtype, options_.device, options_.stream);
  Tensor send = st.value_shard;
  if (st.shard_from_master) {
    send = Tensor::empty({st.shard}, options_.compute_dtype, options_.device, options_.stream);
  }
  lane_.begin();
  if (st.shard_from_master) {
    // The own chunk in the compute dtype, cast on the lane from the master the optimizer last
    // wrote (the lane waited for the compute stream above; the next optimizer step runs after
    // the compute stream consumed this gather). On the compute stream the casts were in line
    // with the layers: 22 ms of a 878 ms Llama 8B step on two H200s.
    kernels::cast(send, st.master, lane_.stream());
  }
  if (st.shard_offloaded) {
    // offload_param: the chunk crosses to the device on the lane, ahead of its all-gather (and
    // while the compute stream goes on with the unit before).
    auto chunk = load_own_chunk(u, lane_.stream());
    if (chunk.is_ok()) {
      send = std::move(chunk).value();
    } else {
      record(chunk.status());
      send = Tensor::zeros({st.shard}, options_.compute_dtype, options_.device, lane_.stream());
    }
  }
  CommHandle h = options_.comm->all_gather(st.value, send, lane_.stream());
  const Tensor used[] = {st.value, send};
  done = lane_.end(used);
  live_elements_ += st.padded;
  return h;
}

void ZeroState::gather(int u) {
  UnitState& st = units_[u];
  if (st.persistent) return;
  if (st.gather_refs++ > 0) return;
  // Timing (wall_clock_breakdown): what the compute stream (or the host, on the CPU) spends on
  // this gather from here until the unit may compute: the collective itself when it runs in
  // line, the wait for it when it was prefetched or runs on the communication stream.
  if (time_gathers_) gather_spans_.begin(options_.stream);
  CommHandle h;
  CommDone done;
  if (st.gather_in_flight) {
    st.gather_in_flight = false;
    h = std::move(st.pending_gather);
    done = std::move(st.gather_done);
  } else {
    h = issue_gather(u, done);
  }
  // The unit computes next: the compute stream waits for the gather (GPU), or the host does (CPU).
  if (options_.device.is_cuda()) {
    lane_.consume(done);
    keep_stream_handle(std::move(h));
  } else {
    record(h.wait());
  }
  if (time_gathers_) gather_spans_.end(options_.stream);
  model_.units()[u]->bind_values(st.value);
}

void ZeroState::prefetch(int u) {
  if (u < 0 || u >= static_cast<int>(units_.size())) return;
  if (model_.units()[u]->passive()) return;  // gathered with the unit that reads it
  UnitState& st = units_[u];
  if (st.persistent || st.gather_refs > 0 || st.gather_in_flight) return;
  // DeepSpeed fetches ahead while `numel_prefetching < min(max_live - live, bucket)`: the first
  // candidate goes whatever its size, so a unit larger than the bucket is still prefetched
  // (DeepSpeed would fetch its first parameter tensor; a unit here is the whole group).
  if (!should_prefetch(options_.prefetch_elements, options_.max_live_elements, live_elements_)) {
    return;
  }
  if (st.shard_offloaded && options_.param_placement == ParamPlacement::kNvme) {
    // The disk is the slow part: read ahead while the current unit computes; the copy to the
    // device and the all-gather follow when the unit is gathered.
    start_param_read(u);
    ++prefetches_issued_;
    return;
  }
  st.pending_gather = issue_gather(u, st.gather_done);
  st.gather_in_flight = true;
  ++prefetches_issued_;
}

void ZeroState::prefetch_next_forward() {
  if (options_.stage < 3 || !options_.device.is_cuda()) return;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    if (model_.units()[u]->passive()) continue;
    prefetch(u);
    return;
  }
}

void ZeroState::drop_prefetches() {
  for (auto& st : units_) {
    if (!st.gather_in_flight) continue;
    record(st.pending_gather.wait());
    st.gather_in_flight = false;
    st.pending_gather = CommHandle();
    st.gather_done.reset();
    st.value = Tensor();  // (the lane marked it used: its block is reused after the gather)
    live_elements_ -= st.padded;
  }
  if (param_file_ != nullptr) settle_param_reads();
}

void ZeroState::release(int u) {
  UnitState& st = units_[u];
  if (st.persistent) return;
  ZT_ASSERT(st.gather_refs > 0, "release of unit {} that is not gathered", u);
  if (--st.gather_refs > 0) return;
  model_.units()[u]->bind_values(Tensor());
  st.value = Tensor();
  live_elements_ -= st.padded;
}

void ZeroState::before_forward(int unit) {
  if (options_.stage < 3) return;
  gather(unit);
  for (int e : model_.units()[unit]->extra_units()) gather(e);
  prefetch(unit + 1);
}

void ZeroState::after_forward(int unit) {
  if (options_.stage < 3) return;
  for (int e : model_.units()[unit]->extra_units()) release(e);
  release(unit);
}

void ZeroState::before_backward(int unit) {
  if (options_.stage >= 3) {
    gather(unit);
    for (int e : model_.units()[unit]->extra_units()) gather(e);
    prefetch(unit - 1);
  }
  if (options_.stage >= 2) {
    ensure_grad(unit);
    for (int e : model_.units()[unit]->extra_units()) ensure_grad(e);
  }
}

void ZeroState::after_backward(int unit) {
  if (options_.stage <= 1 && !boundary_) {
    // A micro-step that does not reduce: what no op of this pass wrote is zero from now on.
    model_.units()[unit]->clear_unwritten_grads(options_.stream);
    for (int e : model_.units()[unit]->extra_units()) {
      if (model_.units()[e]->passive()) model_.units()[e]->clear_unwritten_grads(options_.stream);
    }
  }
  if (options_.stage >= 2 || boundary_) {
    bucket_unit(unit);
    // A passive unit's gradient (adapters) is complete once the unit that reads it is done.
    for (int e : model_.units()[unit]->extra_units()) {
      if (model_.units()[e]->passive()) bucket_unit(e);
    }
  }
  if (options_.stage >= 3) {
    for (int e : model_.units()[unit]->extra_units()) release(e);
    release(unit);
  }
}

}  // namespace zt::zero

// ---- the hybrid engine's whole weights

namespace zt::zero {

int64_t ZeroState::full_weights_bytes() const {
  if (options_.stage < 3) return 0;
  int64_t n = 0;
  for (const UnitState& st : units_) {
    if (!st.persistent) n += st.padded;
  }
  return n * static_cast<int64_t>(dtype_size(options_.compute_dtype));
}

Status ZeroState::hold_full_weights() {
  if (options_.stage < 3 || held_) return Status::ok();
  Status fits = Status::ok();
  if (options_.device.is_cuda()) {
    const int64_t need = full_weights_bytes();
    const int64_t total = cuda_device_total_memory(options_.device.index);
    const auto in_use = static_cast<int64_t>(allocator_stats(options_.device).allocated_bytes);
    // A margin for the work of the forwards that follow (activations, the KV cache).
    if (total > 0 && need + in_use > total - total / 16) {
      fits = Status(StatusCode::kOutOfMemory, fmt::format(
          "the hybrid engine gathers the whole model onto every GPU for generation: {:.2f} GiB "
          "in {} beside the {:.2f} GiB in use does not fit {}'s {:.2f} GiB on rank {}; turn the "
          "hybrid engine off (--enable-hybrid-engine, hybrid_engine.enabled: generation then "
          "gathers each unit per token), split its generation (--inference-tp-size) or use "
          "more or larger GPUs",
          need / 1073741824.0, dtype_name(options_.compute_dtype), in_use / 1073741824.0,
          options_.device.str(), total / 1073741824.0, rank()));
    }
  }
  // Every rank learns whether any cannot hold it before any gathers (or one would wait alone).
  std::vector<double> failed{fits.is_ok() ? 0.0 : 1.0};
  ZT_RETURN_IF_ERROR(all_reduce_doubles(failed, ReduceOp::kMax));
  if (!fits.is_ok()) return fits;
  if (failed[0] != 0.0) {
    return Status(StatusCode::kOutOfMemory,
                  "the hybrid engine's whole model does not fit another rank's GPU (its log "
                  "says how much it needs)");
  }
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) gather(u);
  held_ = true;
  Status s = finish_pass();
  if (!s.is_ok()) release_full_weights();  // (nothing stays gathered after a failure)
  return s.with_context("gathering the whole model for the hybrid engine: ");
}

void ZeroState::release_full_weights() {
  if (!held_) return;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) release(u);
  held_ = false;
}

}  // namespace zt::zero
