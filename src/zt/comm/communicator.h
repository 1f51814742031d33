// Communicator: the collectives the ZeRO stages are built from (all_reduce, reduce_scatter,
// all_gather, broadcast, send/recv, barrier), over one of three backends: NCCL on GPUs (comm/nccl),
// Gloo on CPUs (comm/gloo), and a stub for a single process (comm/stub). Every rank must issue the
// same collectives in the same order, as with NCCL and torch.distributed.
//
// Asynchrony: each call is enqueued (on `stream` when given, else on the communicator's own stream;
// CPU backends ignore streams) and returns a CommHandle. The tensors must stay untouched until
// wait() returns; wait() blocks the calling thread until the operation finished or failed. Every
// operation has the communicator's timeout; a timeout or a dead peer comes back as a non-ok Status
// from wait() that names the operation, this rank and, when known, the peer, and the communicator
// then refuses further work (its peers are in an unknown state; the engine exits cleanly).
//
// Dtypes: f32, f16, bf16, f64, i32, i64, u8. kAvg on integers divides with truncation (as NCCL).
// Misuse (wrong sizes, devices or dtypes, a root outside the world) is a bug in the caller and
// aborts with ZT_ASSERT.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "zt/comm/env.h"
#include "zt/core/device.h"
#include "zt/core/status.h"
#include "zt/core/tensor.h"

namespace zt {

enum class ReduceOp : unsigned char { kSum, kMax, kMin, kAvg };
std::string_view reduce_op_name(ReduceOp op);

// True for the dtypes every backend carries (see the file comment).
bool comm_dtype_supported(DType dtype);

// The state of one enqueued operation, implemented by each backend.
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Blocks until the operation finished; its Status. Calling it again returns the same Status.
  virtual Status wait() = 0;
};

// A handle to an enqueued operation. A default-constructed or ready() handle is already complete.
class [[nodiscard]] CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<CommWork> work) : work_(std::move(work)) {}
  // A handle that is already complete with `status` (synchronous backends, early failures).
  static CommHandle ready(Status status);
  Status wait();

 private:
  std::shared_ptr<CommWork> work_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;
  virtual std::string_view backend_name() const = 0;  // "nccl", "gloo", "stub"

  // Every rank's `inout` combined elementwise with `op`, written back to `inout` on every rank.
  // Any numel.
  virtual CommHandle all_reduce(Tensor& inout, ReduceOp op,
                                std::optional<Stream> stream = std::nullopt) = 0;
  // `in` holds world_size equal blocks of out.numel() elements; rank r receives block r of the
  // elementwise combination of every rank's `in`.
  virtual CommHandle reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op,
                                    std::optional<Stream> stream = std::nullopt) = 0;
  // Coalesced forms: several tensors in one operation, with the same result as one call per tensor
  // (the same sums, elementwise), so a ZeRO gradient bucket costs one collective. NCCL issues the
  // calls in one group (ncclGroupStart/End); Gloo runs one collective over a packed host buffer;
  // the stub loops. The tensors share one dtype; outs[i] and ins[i] pair up as in
  // reduce_scatter. An empty span is a complete no-op.
  virtual CommHandle all_reduce_coalesced(std::span<Tensor> inouts, ReduceOp op,
                                          std::optional<Stream> stream = std::nullopt);
  virtual CommHandle reduce_scatter_coalesced(std::span<Tensor> outs, std::span<const Tensor> ins,
                                              ReduceOp op,
                                              std::optional<Stream> stream = std::nullopt);
  // `out` (world_size * in.numel() elements) = concatenation of every rank's `in`, rank order.
  virtual CommHandle all_gather(Tensor& out, const Tensor& in,
                                std::optional<Stream> stream = std::nullopt) = 0;
  // `inout` of rank `root` copied to every rank's `inout`.
  virtual CommHandle broadcast(Tensor& inout, int root,
                               std::optional<Stream> stream = std::nullopt) = 0;
  // Point to point. The k-th send from A to B matches the k-th recv on B from A (same numel and
  // dtype). As with NCCL outside a group, operations run in the order they were issued, so two
  // ranks that exchange must not both send first (e.g. the lower rank sends first).
  virtual CommHandle send(const Tensor& in, int peer,
                          std::optional<Stream> stream = std::nullopt) = 0;
  virtual CommHandle recv(Tensor& out, int peer, std::optional<Stream> stream = std::nullopt) = 0;
  // Returns when every rank has called barrier (and, on streams, their earlier work is done).
  virtual CommHandle barrier(std::optional<Stream> stream = std::nullopt) = 0;

  // A communicator over a subset of this one's ranks (torch.distributed.new_group): the data-,
  // pipeline- and tensor-parallel groups of 3D parallelism (pipe/topology.h). Collective over
  // this communicator: every rank calls it with the same list, and calls for several groups come
  // in the same order on every rank. `ranks` are this communicator's ranks, distinct, in the
  // order that numbers the group (rank ranks[i] is the group's rank i). A member gets the group's
  // communicator, on the same device and with the same timeout; a rank outside the list gets
  // null. A group of one rank is a single-process communicator. Errors: a list that is empty,
  // repeats a rank or names one outside [0, world_size); a member that cannot connect.
  // The group shares nothing with this communicator but its rendezvous, so the two may be used
  // in any interleaving (as NCCL requires, not from two threads at once on one GPU).
  // The base implementation forms groups of one rank only (the stub and test doubles); Gloo and
  // NCCL form any.
  virtual Result<std::unique_ptr<Communicator>> new_group(std::span<const int> ranks);

 protected:
  Communicator() = default;
};

// The communicator of this process: the stub when env.world_size == 1, NCCL when `device` is a CUDA
// device, Gloo when it is the CPU. Rank 0 serves the rendezvous store on env.master_port (it stays
// up for the communicator's life); every rank connects to it, with env.timeout as the deadline.
Result<std::unique_ptr<Communicator>> communicator_create(const DistEnv& env, Device device);
// The NCCL library's version code (22703 = 2.27.3); 0 without a CUDA build.
int comm_nccl_version();
// Gloo's version from its headers, "0.5.0".
std::string comm_gloo_version();

// The checks every backend's new_group makes first: the list is non-empty, distinct and inside
// [0, world_size). Returns this rank's index in it, or -1 when it is not a member.
Result<int> comm_group_index(std::span<const int> ranks, int rank, int world_size);

// The message every backend gives a failed operation, so users see one shape:
// "all_reduce on rank 1 of 2 failed: <what>".
std::string comm_failure_message(std::string_view op, int rank, int world_size,
                                 std::string_view what);

}  // namespace zt
