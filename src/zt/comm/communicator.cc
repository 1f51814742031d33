// Communicator helpers and the backend choice (communicator.h). The rendezvous store is created
// here, so every backend gets a connected one: rank 0 serves it and keeps serving for the life of
// the communicator that owns it.
#include "zt/comm/communicator.h"

#include <vector>

#include "zt/build_config.h"
#include <gloo/config.h>

#include "zt/comm/gloo/gloo_communicator.h"
#include "zt/comm/store/tcp_store.h"
#include "zt/comm/stub/stub_communicator.h"
#include "zt/core/log.h"
#if ZT_HAVE_CUDA
#include "zt/comm/nccl/nccl_communicator.h"
#endif

namespace zt {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

bool comm_dtype_supported(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::f64:
    case DType::i32:
    case DType::i64:
    case DType::u8:
      return true;
    case DType::u16:
      return false;  // token ids only; no backend has it natively
  }
  return false;
}

CommHandle CommHandle::ready(Status status) {
  class ReadyWork final : public CommWork {
   public:
    explicit ReadyWork(Status s) : status_(std::move(s)) {}
    Status wait() override { return status_; }

   private:
    Status status_;
  };
  if (status.is_ok()) return CommHandle();
  return CommHandle(std::make_shared<ReadyWork>(std::move(status)));
}

Status CommHandle::wait() {
  return work_ ? work_->wait() : Status::ok();
}

namespace {

// The handle of several operations issued one by one: wait() waits for each (all of them, even
// after a failure, so none is left running on the caller's tensors) and returns the first error.
class GroupWork final : public CommWork {
 public:
  explicit GroupWork(std::vector<CommHandle> handles) : handles_(std::move(handles)) {}
  Status wait() override {
    Status first;
    for (CommHandle& h : handles_) {
      Status s = h.wait();
      if (first.is_ok() && !s.is_ok()) first = s;
    }
    return first;
  }

 private:
  std::vector<CommHandle> handles_;
};

void check_coalesced(std::span<const Tensor> ts, const char* op) {
  for (const Tensor& t : ts) {
    ZT_ASSERT(t.defined() && t.dtype() == ts.front().dtype(),
              "{}: every tensor must have the first one's dtype {}", op,
              dtype_name(ts.front().dtype()));
  }
}

}  // namespace

// The per-tensor loop: backends without a grouped form of their own (the stub).
CommHandle Communicator::all_reduce_coalesced(std::span<Tensor> inouts, ReduceOp op,
                                              std::optional<Stream> stream) {
  if (inouts.empty()) return CommHandle();
  check_coalesced(inouts, "all_reduce_coalesced");
  std::vector<CommHandle> handles;
  for (Tensor& t : inouts) handles.push_back(all_reduce(t, op, stream));
  return CommHandle(std::make_shared<GroupWork>(std::move(handles)));
}

CommHandle Communicator::reduce_scatter_coalesced(std::span<Tensor> outs,
                                                  std::span<const Tensor> ins, ReduceOp op,
                                                  std::optional<Stream> stream) {
  ZT_ASSERT(outs.size() == ins.size(), "reduce_scatter_coalesced: {} outputs for {} inputs",
            outs.size(), ins.size());
  if (outs.empty()) return CommHandle();
  check_coalesced(outs, "reduce_scatter_coalesced");
  check_coalesced(ins, "reduce_scatter_coalesced");
  std::vector<CommHandle> handles;
  for (size_t i = 0; i < outs.size(); ++i) {
    handles.push_back(reduce_scatter(outs[i], ins[i], op, stream));
  }
  return CommHandle(std::make_shared<GroupWork>(std::move(handles)));
}

Result<int> comm_group_index(std::span<const int> ranks, int rank, int world_size) {
  if (ranks.empty()) return invalid_argument("new_group: the list of ranks is empty");
  int index = -1;
  std::vector<bool> seen(static_cast<size_t>(world_size), false);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= world_size) {
      return invalid_argument("new_group: rank {} is outside the world of {} rank(s)", r,
                              world_size);
    }
    if (seen[static_cast<size_t>(r)]) {
      return invalid_argument("new_group: rank {} appears twice in the list", r);
    }
    seen[static_cast<size_t>(r)] = true;
    if (r == rank) index = static_cast<int>(i);
  }
  return index;
}

Result<std::unique_ptr<Communicator>> Communicator::new_group(std::span<const int> ranks) {
  ZT_ASSIGN_OR_RETURN(const int index, comm_group_index(ranks, rank(), world_size()));
  if (ranks.size() > 1) {
    return unavailable("new_group: the {} communicator forms no group of {} ranks",
                       backend_name(), ranks.size());
  }
  if (index < 0) return std::unique_ptr<Communicator>();
  return stub_communicator_create(device());
}

std::string comm_failure_message(std::string_view op, int rank, int world_size,
                                 std::string_view what) {
  return fmt::format("{} on rank {} of {} failed: {}", op, rank, world_size, what);
}

Result<std::unique_ptr<Communicator>> communicator_create(const DistEnv& env, Device device) {
  ZT_RETURN_IF_ERROR(device_check(device));
  if (env.world_size == 1) return stub_communicator_create(device);
  TcpStoreOptions options{.host = env.master_addr,
                          .port = env.master_port,
                          .token = env.job_token,
                          .timeout = env.timeout,
                          .rank = env.rank,
                          .role = env.rank == 0 ? StoreRole::kServerAndClient : StoreRole::kClient};
  auto store_or = TcpStore::connect(options);
  if (!store_or.is_ok()) {
    return store_or.status().with_context(
        fmt::format("rendezvous of rank {} of {}: ", env.rank, env.world_size));
  }
  std::shared_ptr<TcpStore> store = std::move(store_or).value();
  if (device.is_cuda()) {
#if ZT_HAVE_CUDA
    return nccl_communicator_create(env, device, std::move(store));
#else
    ZT_ASSERT(false, "device_check accepted a CUDA device in a build without CUDA");
#endif
  }
  return gloo_communicator_create(env, std::move(store));
}

int comm_nccl_version() {
#if ZT_HAVE_CUDA
  return nccl_version();
#else
  return 0;
#endif
}

std::string comm_gloo_version() {
  return fmt::format("{}.{}.{}", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
}

}  // namespace zt
