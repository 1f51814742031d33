// Stub communicator (stub_communicator.h). With one rank, all_reduce/broadcast leave the data as
// it is (kAvg divides by 1), reduce_scatter/all_gather copy `in` to `out`, barrier does nothing;
// send/recv have no peer and are caller bugs.
#include "zt/comm/stub/stub_communicator.h"

namespace zt {
namespace {

class StubCommunicator final : public Communicator {
 public:
  explicit StubCommunicator(Device device) : device_(device) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Device device() const override { return device_; }
  std::string_view backend_name() const override { return "stub"; }

  CommHandle all_reduce(Tensor& inout, ReduceOp, std::optional<Stream>) override {
    check(inout, "all_reduce");
    return CommHandle::ready(Status::ok());
  }
  CommHandle reduce_scatter(Tensor& out, const Tensor& in, ReduceOp,
                            std::optional<Stream> stream) override {
    return copy(out, in, stream, "reduce_scatter");
  }
  CommHandle all_gather(Tensor& out, const Tensor& in, std::optional<Stream> stream) override {
    return copy(out, in, stream, "all_gather");
  }
  CommHandle broadcast(Tensor& inout, int root, std::optional<Stream>) override {
    check(inout, "broadcast");
    ZT_ASSERT(root == 0, "broadcast from root {} in a world of 1", root);
    return CommHandle::ready(Status::ok());
  }
  CommHandle send(const Tensor&, int peer, std::optional<Stream>) override {
    ZT_ASSERT(false, "send to rank {} in a world of 1: there is no peer", peer);
    return {};
  }
  CommHandle recv(Tensor&, int peer, std::optional<Stream>) override {
    ZT_ASSERT(false, "recv from rank {} in a world of 1: there is no peer", peer);
    return {};
  }
  CommHandle barrier(std::optional<Stream>) override { return CommHandle::ready(Status::ok()); }

 private:
  void check(const Tensor& t, const char* op) const {
    ZT_ASSERT(t.defined() && t.device() == device_,
              "{}: tensor on {} given to a communicator on {}", op,
              t.defined() ? t.device().str() : "(undefined)", device_.str());
    ZT_ASSERT(comm_dtype_supported(t.dtype()), "{}: dtype {} is not supported", op,
              dtype_name(t.dtype()));
  }
  CommHandle copy(Tensor& out, const Tensor& in, std::optional<Stream> stream, const char* op) {
    check(out, op);
    check(in, op);
    ZT_ASSERT(out.numel() == in.numel() && out.dtype() == in.dtype(),
              "{}: out has {} {} elements, in {} {}", op, out.numel(), dtype_name(out.dtype()),
              in.numel(), dtype_name(in.dtype()));
    if (out.data() != in.data()) out.copy_from(in, stream.value_or(Stream(device_, nullptr)));
    return CommHandle::ready(Status::ok());
  }

  Device device_;
};

}  // namespace

std::unique_ptr<Communicator> stub_communicator_create(Device device) {
  return std::make_unique<StubCommunicator>(device);
}

}  // namespace zt
