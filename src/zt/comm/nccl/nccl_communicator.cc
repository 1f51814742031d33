// The NCCL backend (nccl_communicator.h). Collectives are enqueued on the given CUDA stream (or the
// communicator's own non-blocking stream), followed by a CUDA event. The communicator is created
// non-blocking (config.blocking = 0), so no NCCL call can hang the host: a call that answers
// ncclInProgress is polled with a deadline. CommHandle::wait() is the watchdog: it polls the
// operation's event and ncclCommGetAsyncError until the event completes, NCCL reports an error
// (a peer died, a network failure), or the timeout passes; in the last two cases it aborts the
// communicator (ncclCommAbort frees kernels stuck waiting on a dead peer) and returns a Status
// naming the operation. An aborted communicator refuses every later operation with that Status.
// The watchdog depends only on the operation's own event and the communicator, so it is the same
// whichever stream the operation ran on (the compute stream, a communication stream, or ours).
// The operation's tensors are marked as used on its stream (Tensor::record_stream), so the
// caller may drop them at once: the caching allocator reuses their blocks only after the
// operation. The coalesced forms issue their calls in one NCCL group.
#include "zt/comm/nccl/nccl_communicator.h"
#include "zt/comm/stub/stub_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;
const char kIdKey[] = "zt/nccl/unique_id";

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f64:
      return ncclFloat64;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
    case DType::u16:
      break;
  }
  ZT_ASSERT(false, "dtype {} is not supported by the communicator", dtype_name(d));
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

std::string seconds_text(std::chrono::milliseconds t) {
  return fmt::format("{:g} s", static_cast<double>(t.count()) / 1000.0);
}

// Sets the current CUDA device for a scope and restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// What the communicator and its outstanding handles share: the NCCL communicator (destroyed when
// the last of them goes) and the first failure.
struct NcclState {
  int rank = 0;
  int world = 1;
  int device = 0;
  std::chrono::milliseconds timeout{};
  std::mutex mu;  // guards comm calls and `failure`
  ncclComm_t comm = nullptr;
  cudaStream_t own_stream = nullptr;
  bool aborted = false;
  Status failure;

  ~NcclState() {
    DeviceGuard guard(device);
    if (comm != nullptr && !aborted) {
      // Flush outstanding work, bounded; abort if a peer is gone.
      ncclResult_t r = ncclCommFinalize(comm);
      auto deadline = Clock::now() + std::min(timeout, std::chrono::milliseconds(60'000));
      while (r == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
      }
      if (r == ncclSuccess) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
    }
    if (own_stream != nullptr) cudaStreamDestroy(own_stream);
  }

  // Aborts the communicator (once) and remembers `s` as its failure. Called with `mu` held.
  Status fail_locked(Status s) {
    if (!aborted && comm != nullptr) {
      ncclCommAbort(comm);
      aborted = true;
    }
    if (failure.is_ok()) failure = s;
    return s;
  }

  // Polls until a non-blocking call that answered ncclInProgress settles. Called with `mu` held.
  // A collective usually settles within microseconds, so poll first without sleeping (a fixed
  // 100 us sleep made every small collective cost 100 us), then back off to short sleeps.
  ncclResult_t settle_locked(ncclResult_t r, Clock::time_point deadline) {
    const Clock::time_point spin_until = Clock::now() + std::chrono::microseconds(200);
    while (r == ncclInProgress) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return ncclInProgress;
      if (now < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      if (ncclResult_t q = ncclCommGetAsyncError(comm, &r); q != ncclSuccess) return q;
    }
    return r;
  }

  std::string nccl_error_text(ncclResult_t r) const {
    const char* last = ncclGetLastError(comm);
    return fmt::format("NCCL error '{}'{}{}", ncclGetErrorString(r),
                       last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : "");
  }

  Status failure_of(std::string_view op, ncclResult_t r) {
    std::string what = nccl_error_text(r);
    if (r == ncclRemoteError || r == ncclSystemError) {
      what += " (a peer rank probably died or its network failed; see the other ranks' logs)";
    }
    return {StatusCode::kUnavailable, comm_failure_message(op, rank, world, what)};
  }
};

class NcclWork final : public CommWork {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string op, cudaEvent_t event)
      : state_(std::move(state)),
        op_(std::move(op)),
        event_(event),
        deadline_(Clock::now() + state_->timeout) {}
  ~NcclWork() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }

  Status wait() override {
    std::lock_guard<std::mutex> wait_lock(wait_mu_);
    if (done_) return status_;
    status_ = poll_until_done();
    done_ = true;
    return status_;
  }

 private:
  Status poll_until_done() {
    int spins = 0;
    while (true) {
      cudaError_t q = cudaEventQuery(event_);
      if (q == cudaSuccess) return Status::ok();
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!state_->failure.is_ok()) {
        return {state_->failure.code(),
                comm_failure_message(
                    op_, state_->rank, state_->world,
                    fmt::format("the communicator failed: {}", state_->failure.message()))};
      }
      if (q != cudaErrorNotReady) {
        return state_->fail_locked(
            {StatusCode::kInternal,
             comm_failure_message(op_, state_->rank, state_->world,
                                  fmt::format("CUDA error '{}'", cudaGetErrorString(q)))});
      }
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(state_->comm, &async);
      if (r != ncclSuccess) async = r;
      if (async != ncclSuccess && async != ncclInProgress) {
        return state_->fail_locked(state_->failure_of(op_, async));
      }
      if (Clock::now() >= deadline_) {
        return state_->fail_locked(
            {StatusCode::kTimeout,
             comm_failure_message(
                 op_, state_->rank, state_->world,
                 fmt::format("not finished after {}: a rank did not reach this operation, or is "
                             "stuck or dead (see the other ranks' logs; the timeout is "
                             "ZT_COMM_TIMEOUT_S seconds or DEEPSPEED_TIMEOUT minutes); the NCCL "
                             "communicator was aborted",
                             seconds_text(state_->timeout)))});
      }
      // Spin briefly for short collectives, then back off to spare the CPU.
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::shared_ptr<NcclState> state_;
  std::string op_;
  cudaEvent_t event_ = nullptr;
  Clock::time_point deadline_;
  std::mutex wait_mu_;
  bool done_ = false;
  Status status_;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclState> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank; }
  int world_size() const override { return state_->world; }
  Device device() const override { return Device::cuda(state_->device); }
  std::string_view backend_name() const override { return "nccl"; }

  // ncclCommSplit: collective over this communicator; the members take color 0 and their index
  // in the list as key (so the group numbers them in list order), the others NCCL_SPLIT_NOCOLOR.
  Result<std::unique_ptr<Communicator>> new_group(std::span<const int> ranks) override {
    ZT_ASSIGN_OR_RETURN(const int index, comm_group_index(ranks, state_->rank, state_->world));
    // A group of one needs no NCCL communicator (every rank knows the size, so none calls the
    // split): its member gets a single-process one.
    if (ranks.size() == 1) {
      if (index < 0) return std::unique_ptr<Communicator>();
      return stub_communicator_create(device());
    }
    DeviceGuard guard(state_->device);
    auto child = std::make_shared<NcclState>();
    child->rank = index;
    child->world = static_cast<int>(ranks.size());
    child->device = state_->device;
    child->timeout = state_->timeout;
    const std::string op = fmt::format("new_group of {} rank(s) (ncclCommSplit)", ranks.size());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->failure.is_ok()) return state_->failure;
    ncclResult_t r = ncclCommSplit(state_->comm, index < 0 ? NCCL_SPLIT_NOCOLOR : 0,
                                   std::max(index, 0), &child->comm, &config);
    const Clock::time_point deadline = Clock::now() + state_->timeout;
    // Non-blocking, the split runs as a job of the parent (NCCL 2.28): the parent reports
    // ncclInProgress until it is done, and only then is the new communicator's handle written.
    // Every rank waits for the parent to settle (the next use of the parent would fail before),
    // then a member for its new communicator to be ready.
    if (r == ncclSuccess || r == ncclInProgress) r = state_->settle_locked(ncclInProgress, deadline);
    if (r == ncclSuccess && index >= 0) {
      // The job stores the handle as it finishes; wait for the store, bounded.
      while (__atomic_load_n(&child->comm, __ATOMIC_ACQUIRE) == nullptr && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (child->comm == nullptr) {
        return state_->fail_locked(state_->failure_of(op, ncclInternalError)
                                       .with_context("ncclCommSplit gave this member no "
                                                     "communicator: "));
      }
      r = child->settle_locked(ncclInProgress, deadline);
    }
    if (r == ncclInProgress) {
      if (child->comm != nullptr) {
        ncclCommAbort(child->comm);
        child->comm = nullptr;
      }
      return state_->fail_locked(
          {StatusCode::kTimeout,
           comm_failure_message(op, state_->rank, state_->world,
                                fmt::format("not finished after {}: a rank did not call it",
                                            seconds_text(state_->timeout)))});
    }
    if (r != ncclSuccess) {
      if (child->comm != nullptr) {
        ncclCommAbort(child->comm);
        child->comm = nullptr;
      }
      return state_->fail_locked(state_->failure_of(op, r));
    }
    if (index < 0) return std::unique_ptr<Communicator>();
    if (cudaError_t e = cudaStreamCreateWithFlags(&child->own_stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      // (aborted, not finalized: its peers may not get this far)
      return child->fail_locked(unavailable("{}: cudaStreamCreate: {}", op, cudaGetErrorString(e)));
    }
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(child)));
  }

  CommHandle all_reduce(Tensor& inout, ReduceOp op, std::optional<Stream> stream) override {
    check(inout, "all_reduce");
    return enqueue("all_reduce", stream, {inout}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(inout.data(), inout.data(), static_cast<size_t>(inout.numel()),
                           nccl_dtype(inout.dtype()), nccl_op(op), c, s);
    });
  }

  CommHandle reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op,
                            std::optional<Stream> stream) override {
    check(out, "reduce_scatter");
    check(in, "reduce_scatter");
    ZT_ASSERT(in.dtype() == out.dtype() && in.numel() == out.numel() * world_size(),
              "reduce_scatter: in has {} elements, expected world_size {} x out's {}", in.numel(),
              world_size(), out.numel());
    return enqueue("reduce_scatter", stream, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()),
                               nccl_dtype(out.dtype()), nccl_op(op), c, s);
    });
  }

  CommHandle all_reduce_coalesced(std::span<Tensor> inouts, ReduceOp op,
                                  std::optional<Stream> stream) override {
    if (inouts.empty()) return CommHandle();
    for (const Tensor& t : inouts) check(t, "all_reduce_coalesced");
    std::vector<Tensor> tensors(inouts.begin(), inouts.end());
    return enqueue("all_reduce_coalesced", stream, tensors, [&](ncclComm_t c, cudaStream_t s) {
      return grouped(tensors.size(), [&](size_t k) {
        const Tensor& t = tensors[k];
        return ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()),
                             nccl_dtype(t.dtype()), nccl_op(op), c, s);
      });
    });
  }

  CommHandle reduce_scatter_coalesced(std::span<Tensor> outs, std::span<const Tensor> ins,
                                      ReduceOp op, std::optional<Stream> stream) override {
    ZT_ASSERT(outs.size() == ins.size(), "reduce_scatter_coalesced: {} outputs for {} inputs",
              outs.size(), ins.size());
    if (outs.empty()) return CommHandle();
    std::vector<Tensor> tensors;
    for (size_t k = 0; k < outs.size(); ++k) {
      check(outs[k], "reduce_scatter_coalesced");
      check(ins[k], "reduce_scatter_coalesced");
      ZT_ASSERT(
          ins[k].dtype() == outs[k].dtype() && ins[k].numel() == outs[k].numel() * world_size(),
          "reduce_scatter_coalesced: in {} has {} elements, expected world_size {} x out's "
          "{}",
          k, ins[k].numel(), world_size(), outs[k].numel());
      tensors.push_back(outs[k]);
      tensors.push_back(ins[k]);
    }
    return enqueue("reduce_scatter_coalesced", stream, tensors, [&](ncclComm_t c, cudaStream_t s) {
      return grouped(outs.size(), [&](size_t k) {
        return ncclReduceScatter(ins[k].data(), outs[k].data(),
                                 static_cast<size_t>(outs[k].numel()), nccl_dtype(outs[k].dtype()),
                                 nccl_op(op), c, s);
      });
    });
  }

  CommHandle all_gather(Tensor& out, const Tensor& in, std::optional<Stream> stream) override {
    check(out, "all_gather");
    check(in, "all_gather");
    ZT_ASSERT(in.dtype() == out.dtype() && out.numel() == in.numel() * world_size(),
              "all_gather: out has {} elements, expected world_size {} x in's {}", out.numel(),
              world_size(), in.numel());
    return enqueue("all_gather", stream, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()),
                           nccl_dtype(in.dtype()), c, s);
    });
  }

  CommHandle broadcast(Tensor& inout, int root, std::optional<Stream> stream) override {
    check(inout, "broadcast");
    ZT_ASSERT(root >= 0 && root < world_size(), "broadcast from root {} in a world of {}", root,
              world_size());
    return enqueue("broadcast", stream, {inout}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(inout.data(), inout.data(), static_cast<size_t>(inout.numel()),
                           nccl_dtype(inout.dtype()), root, c, s);
    });
  }

  CommHandle send(const Tensor& in, int peer, std::optional<Stream> stream) override {
    check(in, "send");
    check_peer(peer, "send");
    return enqueue("send", stream, {in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclSend(in.data(), static_cast<size_t>(in.numel()), nccl_dtype(in.dtype()), peer, c,
                      s);
    });
  }

  CommHandle recv(Tensor& out, int peer, std::optional<Stream> stream) override {
    check(out, "recv");
    check_peer(peer, "recv");
    return enqueue("recv", stream, {out}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclRecv(out.data(), static_cast<size_t>(out.numel()), nccl_dtype(out.dtype()), peer,
                      c, s);
    });
  }

  // NCCL has no barrier: a one-element all_reduce, which completes only when every rank's
  // stream reached it.
  CommHandle barrier(std::optional<Stream> stream) override {
    if (!barrier_buffer_.defined()) {
      barrier_buffer_ = Tensor::zeros({1}, DType::f32, device());
    }
    return enqueue("barrier", stream, {barrier_buffer_}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(barrier_buffer_.data(), barrier_buffer_.data(), 1, ncclFloat32, ncclSum,
                           c, s);
    });
  }

 private:
  void check(const Tensor& t, const char* op) const {
    ZT_ASSERT(t.defined() && t.device() == device(),
              "{}: tensor on {} given to the NCCL "
              "communicator on {}",
              op, t.defined() ? t.device().str() : "(undefined)", device().str());
    ZT_ASSERT(comm_dtype_supported(t.dtype()), "{}: dtype {} is not supported", op,
              dtype_name(t.dtype()));
  }
  void check_peer(int peer, const char* op) const {
    ZT_ASSERT(peer >= 0 && peer < world_size() && peer != rank(), "{}: peer {} on rank {} of {}",
              op, peer, rank(), world_size());
  }

  // Issues call(0) .. call(n - 1) as one NCCL group (one launch, the operations run together).
  // ncclGroupEnd is called whatever the calls answered, so NCCL never stays inside a group; the
  // first error wins, else ncclGroupEnd's answer (ncclInProgress on this non-blocking
  // communicator, which enqueue() settles).
  static ncclResult_t grouped(size_t n, const std::function<ncclResult_t(size_t)>& call) {
    if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
    ncclResult_t first = ncclSuccess;
    for (size_t k = 0; k < n; ++k) {
      ncclResult_t r = call(k);
      if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) first = r;
    }
    ncclResult_t end = ncclGroupEnd();
    return first != ncclSuccess ? first : end;
  }

  CommHandle enqueue(const char* op, const std::optional<Stream>& stream,
                     const std::vector<Tensor>& tensors,
                     const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& call) {
    NcclState& st = *state_;
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.failure.is_ok()) {
      return CommHandle::ready(
          {st.failure.code(),
           comm_failure_message(op, st.rank, st.world,
                                fmt::format("the communicator is unusable after an earlier "
                                            "failure: {}",
                                            st.failure.message()))});
    }
    DeviceGuard guard(st.device);
    cudaStream_t s = stream ? static_cast<cudaStream_t>(stream->handle()) : st.own_stream;
    ncclResult_t r = st.settle_locked(call(st.comm, s), Clock::now() + st.timeout);
    if (r == ncclInProgress) {
      return CommHandle::ready(st.fail_locked(
          {StatusCode::kTimeout,
           comm_failure_message(op, st.rank, st.world,
                                fmt::format("NCCL did not accept the operation within {}",
                                            seconds_text(st.timeout)))}));
    }
    if (r != ncclSuccess) return CommHandle::ready(st.fail_locked(st.failure_of(op, r)));
    cudaEvent_t event = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(event, s);
    if (e != cudaSuccess) {
      if (event != nullptr) cudaEventDestroy(event);
      return CommHandle::ready(st.fail_locked(
          {StatusCode::kInternal,
           comm_failure_message(op, st.rank, st.world,
                                fmt::format("CUDA error '{}' recording the completion event",
                                            cudaGetErrorString(e)))}));
    }
    // The caller may drop its tensors before the operation ran (e.g. on the communicator's own
    // stream): their blocks go back to the caching allocator only after the work queued on `s`
    // so far, this operation included, has completed.
    for (const Tensor& t : tensors) t.record_stream(Stream(device(), s));
    return CommHandle(std::make_shared<NcclWork>(state_, op, event));
  }

  std::shared_ptr<NcclState> state_;
  Tensor barrier_buffer_;
};

}  // namespace

int nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

Result<std::unique_ptr<Communicator>> nccl_communicator_create(const DistEnv& env, Device device,
                                                               std::shared_ptr<TcpStore> store) {
  auto context = [&](const Status& s) {
    return s.with_context(fmt::format("creating the NCCL communicator of rank {} of {} on {}: ",
                                      env.rank, env.world_size, device.str()));
  };
  // NVLink multicast (NVLS) must be off on the machines ZeroTrain targets; a user's own setting
  // wins (overwrite = 0).
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  auto state = std::make_shared<NcclState>();
  state->rank = env.rank;
  state->world = env.world_size;
  state->device = device.index;
  state->timeout = env.timeout;
  DeviceGuard guard(device.index);

  ncclUniqueId id;
  if (env.rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return context(unavailable("ncclGetUniqueId: {}", ncclGetErrorString(r)));
    }
    Status s = store->set(kIdKey, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!s.is_ok()) return context(s);
  } else {
    Result<std::string> v = store->get(kIdKey);
    if (!v.is_ok()) return context(v.status());
    if (v->size() != sizeof(id)) {
      return context(
          unavailable("the NCCL unique id in the store has {} bytes, expected {} (rank "
                      "0 runs another NCCL version?)",
                      v->size(), sizeof(id)));
    }
    std::memcpy(&id, v->data(), sizeof(id));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&state->comm, env.world_size, id, env.rank, &config);
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (r == ncclInProgress) r = state->settle_locked(r, Clock::now() + env.timeout);
    if (r == ncclInProgress) {
      Status s(StatusCode::kTimeout,
               fmt::format("ncclCommInitRank did not finish within {}: a rank did not arrive "
                           "(check that every rank was started, and its log)",
                           seconds_text(env.timeout)));
      return context(state->fail_locked(s));
    }
    if (r != ncclSuccess) {
      Status s = state->failure_of("ncclCommInitRank", r);
      return context(state->fail_locked(s));
    }
  }
  if (cudaError_t e = cudaStreamCreateWithFlags(&state->own_stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return context(unavailable("cudaStreamCreate: {}", cudaGetErrorString(e)));
  }
  // The store is no longer needed: NCCL's init is collective, so every rank has read the id.
  store.reset();
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(state)));
}

}  // namespace zt
