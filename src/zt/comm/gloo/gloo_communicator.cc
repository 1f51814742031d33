// The Gloo backend (gloo_communicator.h). Built on Debian's libgloo (0.5, 2022-05): all_reduce,
// all_gather, broadcast and barrier use Gloo's option-struct collectives with a tag and a timeout
// per call; reduce_scatter uses gloo::ReduceScatterHalvingDoubling (Gloo's only reduce-scatter),
// whose sizes are `int` bytes, so it runs over chunks of at most kScatterChunkBytes; the coalesced
// forms pack their tensors into one host buffer and run one collective; send/recv post
// unbound buffers on the worker and wait for them in CommHandle::wait(). Every Gloo call sits in a
// try block: Gloo reports failures only by exceptions (gloo_errors.h turns them into Status).
#include "zt/comm/gloo/gloo_communicator.h"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "zt/comm/gloo/gloo_errors.h"
#include "zt/comm/gloo/gloo_store.h"
#include "zt/comm/gloo/op_queue.h"
#include "zt/comm/stub/stub_communicator.h"

#include <fmt/ranges.h>
#include "zt/core/log.h"

namespace zt {

// Creates the communicator of `env` (a whole job, or a group: env.rank and env.world_size are
// then the group's) over `store`, its keys under `prefix`.
Result<std::unique_ptr<Communicator>> gloo_create(const DistEnv& env,
                                                  std::shared_ptr<TcpStore> store,
                                                  const std::string& prefix);

namespace {

// Gloo's collectives use slot prefixes 0x01-0x08 (gloo/types.h); point-to-point takes its own.
constexpr uint8_t kP2pSlotPrefix = 0x7a;
// Scratch per reduce_scatter round: far below Gloo's int byte counts, and bounded host memory.
// ZT_GLOO_SCATTER_CHUNK_BYTES overrides it (tests use a tiny value to exercise the rounds).
constexpr int64_t kScatterChunkBytes = int64_t{256} << 20;

int64_t scatter_chunk_bytes_from_environment() {
  const char* v = std::getenv("ZT_GLOO_SCATTER_CHUNK_BYTES");
  if (v == nullptr || *v == '\0') return kScatterChunkBytes;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x <= 0 || x > kScatterChunkBytes) return kScatterChunkBytes;
  return x;
}
const char kKeyPrefix[] = "zt/gloo/";

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

bool is_half(DType d) {
  return d == DType::f16 || d == DType::bf16;
}

// Calls f(std::type_identity<T>{}) with the type Gloo reduces `d` in (f32 for f16/bf16).
template <typename F>
void with_compute_type(DType d, F&& f) {
  switch (d) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return f(std::type_identity<float>{});
    case DType::f64:
      return f(std::type_identity<double>{});
    case DType::i32:
      return f(std::type_identity<int32_t>{});
    case DType::i64:
      return f(std::type_identity<int64_t>{});
    case DType::u8:
      return f(std::type_identity<uint8_t>{});
    case DType::u16:
      break;
  }
  ZT_ASSERT(false, "dtype {} is not supported by the communicator", dtype_name(d));
}

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceOp::kMax:
      return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::kMin:
      return static_cast<ReduceFn>(&gloo::min<T>);
  }
  return nullptr;
}

template <typename T>
const gloo::ReductionFunction<T>* reduction_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kMax:
      return gloo::ReductionFunction<T>::max;
    case ReduceOp::kMin:
      return gloo::ReductionFunction<T>::min;
  }
  return nullptr;
}

// kAvg after a sum; integers truncate, as NCCL's ncclAvg does.
template <typename T>
void divide(T* p, int64_t n, int world) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(world));
}

// Copies n elements of dtype `d` at `src` into compute-type storage at `dst` (converting halves).
template <typename T>
void load(T* dst, const void* src, DType d, int64_t n) {
  if (is_half(d)) {
    convert_host(dst, DType::f32, src, d, n);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  }
}
template <typename T>
void store(void* dst, DType d, const T* src, int64_t n) {
  if (is_half(d)) {
    convert_host(dst, d, src, DType::f32, n);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  }
}

// The local address this host uses to reach host:port (a UDP connect sends nothing; it only
// routes), so Gloo listens on the interface the other ranks can reach.
Result<std::string> local_address_toward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    return unavailable("cannot resolve MASTER_ADDR='{}': {}", host, gai_strerror(rc));
  }
  std::string error = "no address";
  std::string local;
  for (addrinfo* ai = res; ai != nullptr && local.empty(); ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char text[INET6_ADDRSTRLEN] = {};
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      const void* a =
          ss.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
      if (inet_ntop(ss.ss_family, a, text, sizeof(text)) != nullptr) local = text;
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (local.empty()) {
    return unavailable(
        "no local interface reaches MASTER_ADDR='{}' ({}); set GLOO_SOCKET_IFNAME "
        "to the interface to use",
        host, error);
  }
  return local;
}

// Gloo writes to sockets with writev, which raises SIGPIPE when a peer has died; the default
// action would kill this rank before it can report which peer died.
void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const DistEnv& env, std::shared_ptr<TcpStore> store,
                   std::shared_ptr<gloo::rendezvous::Context> ctx,
                   std::shared_ptr<GlooErrorState> errors, std::string prefix)
      : prefix_(std::move(prefix)),
        env_(env),
        rank_(env.rank),
        world_(env.world_size),
        timeout_(env.timeout),
        store_(std::move(store)),
        ctx_(std::move(ctx)),
        errors_(std::move(errors)),
        send_seq_(static_cast<size_t>(world_), 0),
        recv_seq_(static_cast<size_t>(world_), 0) {
    queue_.set_closing_status(Status(
        StatusCode::kUnavailable,
        fmt::format("rank {}: the communicator was destroyed before the operation ran", rank_)));
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend_name() const override { return "gloo"; }

  // A Gloo context of its own over the same store, its keys under a prefix numbered by the
  // order of new_group calls (the same on every rank, members or not).
  Result<std::unique_ptr<Communicator>> new_group(std::span<const int> ranks) override {
    ZT_ASSIGN_OR_RETURN(const int index, comm_group_index(ranks, rank_, world_));
    const int seq = groups_created_++;
    if (index < 0) return std::unique_ptr<Communicator>();
    if (ranks.size() == 1) return stub_communicator_create(Device::cpu());
    DistEnv group = env_;
    group.rank = index;
    group.world_size = static_cast<int>(ranks.size());
    group.local_rank = index;
    group.local_size = group.world_size;
    // Nested under this communicator's own keys: a group's groups never meet the job's.
    auto c = gloo_create(group, store_, fmt::format("{}group{}/", prefix_, seq));
    if (!c.is_ok()) {
      return c.status().with_context(
          fmt::format("new_group of ranks [{}] (this rank {} of {}): ", fmt::join(ranks, ", "),
                      rank_, world_));
    }
    return c;
  }

  CommHandle all_reduce(Tensor& inout, ReduceOp op, std::optional<Stream>) override {
    check(inout, "all_reduce");
    return submit("all_reduce", [this, t = inout, op](std::function<Status()>&) {
      const int64_t n = t.numel();
      if (n == 0) return;
      with_compute_type(t.dtype(), [&]<typename T>(std::type_identity<T>) {
        std::vector<T> staged;
        T* p = static_cast<T*>(t.data());
        if (is_half(t.dtype())) {
          staged.resize(static_cast<size_t>(n));
          load(staged.data(), t.data(), t.dtype(), n);
          p = staged.data();
        }
        gloo::AllreduceOptions opts(ctx_);
        opts.setOutput(p, static_cast<size_t>(n));
        opts.setReduceFunction(reduce_fn<T>(op));
        opts.setTag(next_tag_++);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        if (op == ReduceOp::kAvg) divide(p, n, world_);
        if (is_half(t.dtype())) store(t.data(), t.dtype(), staged.data(), n);
      });
    });
  }

  CommHandle reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op,
                            std::optional<Stream>) override {
    check_scatter_pair(out, in, "reduce_scatter");
    return submit("reduce_scatter", [this, o = out, i = in, op](std::function<Status()>&) {
      run_reduce_scatter({o}, {i}, op);
    });
  }

  // One Gloo all-reduce over the tensors packed side by side (in the compute type).
  CommHandle all_reduce_coalesced(std::span<Tensor> inouts, ReduceOp op,
                                  std::optional<Stream>) override {
    if (inouts.empty()) return CommHandle();
    for (const Tensor& t : inouts) {
      check(t, "all_reduce_coalesced");
      ZT_ASSERT(t.dtype() == inouts.front().dtype(), "all_reduce_coalesced: {} among {}",
                dtype_name(t.dtype()), dtype_name(inouts.front().dtype()));
    }
    std::vector<Tensor> ts(inouts.begin(), inouts.end());
    return submit("all_reduce_coalesced", [this, ts = std::move(ts), op](std::function<Status()>&) {
      int64_t n = 0;
      for (const Tensor& t : ts) n += t.numel();
      if (n == 0) return;
      const DType d = ts.front().dtype();
      with_compute_type(d, [&]<typename T>(std::type_identity<T>) {
        std::vector<T> packed(static_cast<size_t>(n));
        int64_t at = 0;
        for (const Tensor& t : ts) {
          load(packed.data() + at, t.data(), d, t.numel());
          at += t.numel();
        }
        gloo::AllreduceOptions opts(ctx_);
        opts.setOutput(packed.data(), static_cast<size_t>(n));
        opts.setReduceFunction(reduce_fn<T>(op));
        opts.setTag(next_tag_++);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        if (op == ReduceOp::kAvg) divide(packed.data(), n, world_);
        at = 0;
        for (const Tensor& t : ts) {
          store(t.data(), d, packed.data() + at, t.numel());
          at += t.numel();
        }
      });
    });
  }

  // One reduce-scatter over every pair: rank r's block is the concatenation of each pair's block r.
  CommHandle reduce_scatter_coalesced(std::span<Tensor> outs, std::span<const Tensor> ins,
                                      ReduceOp op, std::optional<Stream>) override {
    ZT_ASSERT(outs.size() == ins.size(), "reduce_scatter_coalesced: {} outputs for {} inputs",
              outs.size(), ins.size());
    if (outs.empty()) return CommHandle();
    for (size_t k = 0; k < outs.size(); ++k) {
      check_scatter_pair(outs[k], ins[k], "reduce_scatter_coalesced");
      ZT_ASSERT(outs[k].dtype() == outs.front().dtype(), "reduce_scatter_coalesced: {} among {}",
                dtype_name(outs[k].dtype()), dtype_name(outs.front().dtype()));
    }
    std::vector<Tensor> o(outs.begin(), outs.end()), i(ins.begin(), ins.end());
    return submit("reduce_scatter_coalesced",
                  [this, o = std::move(o), i = std::move(i), op](std::function<Status()>&) {
                    run_reduce_scatter(o, i, op);
                  });
  }

  CommHandle all_gather(Tensor& out, const Tensor& in, std::optional<Stream>) override {
    check(out, "all_gather");
    check(in, "all_gather");
    ZT_ASSERT(in.dtype() == out.dtype() && out.numel() == in.numel() * world_,
              "all_gather: out has {} {} elements, expected world_size {} x in's {} {}",
              out.numel(), dtype_name(out.dtype()), world_, in.numel(), dtype_name(in.dtype()));
    return submit("all_gather", [this, o = out, i = in](std::function<Status()>&) {
      const size_t bytes = i.nbytes();
      if (bytes == 0) return;
      auto* out_bytes = static_cast<uint8_t*>(o.data());
      gloo::AllgatherOptions opts(ctx_);
      // `in` already in its place in `out` (ZeRO gathers a shard that is a view of the whole):
      // Gloo's in-place form, without input.
      if (i.data() != out_bytes + static_cast<size_t>(rank_) * bytes) {
        opts.setInput(static_cast<uint8_t*>(i.data()), bytes);
      }
      opts.setOutput(out_bytes, bytes * static_cast<size_t>(world_));
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  CommHandle broadcast(Tensor& inout, int root, std::optional<Stream>) override {
    check(inout, "broadcast");
    ZT_ASSERT(root >= 0 && root < world_, "broadcast from root {} in a world of {}", root, world_);
    return submit("broadcast", [this, t = inout, root](std::function<Status()>&) {
      if (t.nbytes() == 0) return;
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<uint8_t*>(t.data()), t.nbytes());
      opts.setRoot(root);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  CommHandle send(const Tensor& in, int peer, std::optional<Stream>) override {
    check(in, "send");
    check_peer(peer, "send");
    return post_p2p(P2p::kSend, in, peer);
  }

  CommHandle recv(Tensor& out, int peer, std::optional<Stream>) override {
    check(out, "recv");
    check_peer(peer, "recv");
    return post_p2p(P2p::kRecv, out, peer);
  }

  CommHandle barrier(std::optional<Stream>) override {
    return submit("barrier", [this](std::function<Status()>&) {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  using Body = std::function<void(std::function<Status()>& finish)>;
  enum class P2p : unsigned char { kSend, kRecv };

  void check(const Tensor& t, const char* op) const {
    ZT_ASSERT(t.defined() && t.device().is_cpu(),
              "{}: the Gloo communicator takes CPU tensors, "
              "got one on {}",
              op, t.defined() ? t.device().str() : "(undefined)");
    ZT_ASSERT(comm_dtype_supported(t.dtype()), "{}: dtype {} is not supported", op,
              dtype_name(t.dtype()));
  }
  void check_peer(int peer, const char* op) const {
    ZT_ASSERT(peer >= 0 && peer < world_ && peer != rank_, "{}: peer {} on rank {} of {}", op, peer,
              rank_, world_);
  }

  void check_scatter_pair(const Tensor& out, const Tensor& in, const char* op) const {
    check(out, op);
    check(in, op);
    ZT_ASSERT(in.dtype() == out.dtype() && in.numel() == out.numel() * world_,
              "{}: in has {} {} elements, expected world_size {} x out's {} {}", op, in.numel(),
              dtype_name(in.dtype()), world_, out.numel(), dtype_name(out.dtype()));
  }

  // Reduce-scatter of the pairs (outs[k], ins[k]) as one operation over a virtual block per rank:
  // rank r's block is the concatenation of block r of every ins[k], and rank r receives the
  // reduction of its block, cut back into the outs. Runs in rounds of at most
  // scatter_chunk_bytes_ of scratch (Gloo's ReduceScatterHalvingDoubling counts bytes in int). On
  // the worker thread.
  void run_reduce_scatter(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                          ReduceOp op) {
    std::vector<int64_t> starts;
    int64_t block = 0;
    for (const Tensor& o : outs) {
      starts.push_back(block);
      block += o.numel();
    }
    if (block == 0) return;
    const DType d = outs.front().dtype();
    with_compute_type(d, [&]<typename T>(std::type_identity<T>) {
      const size_t esize = dtype_size(d);
      const int64_t chunk =
          std::max<int64_t>(1, scatter_chunk_bytes_ / static_cast<int64_t>(sizeof(T) * world_));
      std::vector<T> scratch(static_cast<size_t>(world_ * std::min(block, chunk)));
      // f(k, pos, at, n) for each pair k overlapping [off, off + len) of the virtual block: n
      // elements from `pos` in pair k's block, at `at` in the round.
      auto pieces = [&](int64_t off, int64_t len, auto&& f) {
        for (size_t k = 0; k < outs.size(); ++k) {
          const int64_t lo = std::max(off, starts[k]);
          const int64_t hi = std::min(off + len, starts[k] + outs[k].numel());
          if (lo < hi) f(k, lo - starts[k], lo - off, hi - lo);
        }
      };
      for (int64_t off = 0; off < block; off += chunk) {
        const int64_t len = std::min(chunk, block - off);
        // Round `off`: elements [off, off + len) of every rank's block, side by side.
        for (int r = 0; r < world_; ++r) {
          pieces(off, len, [&](size_t k, int64_t pos, int64_t at, int64_t n) {
            const auto* src = static_cast<const char*>(ins[k].data());
            load(scratch.data() + r * len + at,
                 src + static_cast<size_t>(r * outs[k].numel() + pos) * esize, d, n);
          });
        }
        gloo::ReduceScatterHalvingDoubling<T> algo(
            ctx_, std::vector<T*>{scratch.data()}, static_cast<int>(world_ * len),
            std::vector<int>(static_cast<size_t>(world_), static_cast<int>(len)),
            reduction_function<T>(op));
        algo.run();
        if (op == ReduceOp::kAvg) divide(scratch.data(), len, world_);
        pieces(off, len, [&](size_t k, int64_t pos, int64_t at, int64_t n) {
          store(static_cast<char*>(outs[k].data()) + static_cast<size_t>(pos) * esize, d,
                scratch.data() + at, n);
        });
      }
    });
  }

  // Enqueues `body` to run on the worker, refused at once if the communicator failed before.
  CommHandle submit(const char* op, Body body) {
    return queue_.enqueue(
        [this, op, body = std::move(body)](std::function<Status()>& finish) -> Status {
          ZT_RETURN_IF_ERROR(errors_->failed_before(op));
          try {
            body(finish);
          } catch (const std::exception& e) {  // gloo::Exception and std::system_error alike
            return errors_->record(op, e);
          }
          return Status::ok();
        });
  }

  // Posts a send or recv on the worker (keeping issue order); wait() waits for it.
  CommHandle post_p2p(P2p kind, const Tensor& t, int peer) {
    const bool is_send = kind == P2p::kSend;
    const char* op = is_send ? "send" : "recv";
    return submit(op, [this, op, t, peer, is_send](std::function<Status()>& finish) {
      if (t.nbytes() == 0) return;
      std::vector<uint32_t>& seq = is_send ? send_seq_ : recv_seq_;
      auto slot = gloo::Slot::build(kP2pSlotPrefix, seq[static_cast<size_t>(peer)]++);
      std::shared_ptr<gloo::transport::UnboundBuffer> buf =
          ctx_->createUnboundBuffer(t.data(), t.nbytes());
      if (is_send) {
        buf->send(peer, slot);
      } else {
        buf->recv(peer, slot);
      }
      // The completion keeps the tensor and the buffer (which keeps Gloo's transport context)
      // alive, so it is safe even after the communicator is gone.
      finish = [buf, t, errors = errors_, op, is_send, timeout = timeout_]() -> Status {
        try {
          if (is_send) {
            buf->waitSend(timeout);
          } else {
            buf->waitRecv(timeout);
          }
        } catch (const std::exception& e) {
          return errors->record(op, e);
        }
        return Status::ok();
      };
    });
  }

  const std::string prefix_;  // this communicator's store keys (its groups' nest under it)
  const DistEnv env_;
  const int rank_;
  const int world_;
  const std::chrono::milliseconds timeout_;
  int groups_created_ = 0;  // new_group calls so far (the next group's key prefix)
  const int64_t scatter_chunk_bytes_ = scatter_chunk_bytes_from_environment();
  std::shared_ptr<TcpStore> store_;  // on rank 0 this also serves the store
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::shared_ptr<GlooErrorState> errors_;
  // Touched only by the worker thread.
  uint32_t next_tag_ = 1;  // tag 0: the barrier that ends creation
  std::vector<uint32_t> send_seq_;
  std::vector<uint32_t> recv_seq_;
  // Last: destroyed first, so the worker has stopped before the context goes.
  OpQueue queue_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> gloo_create(const DistEnv& env,
                                                  std::shared_ptr<TcpStore> store,
                                                  const std::string& prefix) {
  auto context = [&](const Status& s) {
    return s.with_context(
        fmt::format("creating the Gloo communicator of rank {} of {}: ", env.rank, env.world_size));
  };
  ignore_sigpipe();
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else {
    auto local = local_address_toward(env.master_addr, env.master_port);
    if (!local.is_ok()) return context(local.status());
    attr.hostname = *local;
  }
  auto errors = std::make_shared<GlooErrorState>(env.rank, env.world_size, env.timeout);
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  try {
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    ctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world_size);
    ctx->setTimeout(env.timeout);
    GlooStore gloo_store(store, prefix);
    ctx->connectFullMesh(gloo_store, device);
  } catch (const StoreFailure& e) {
    return context(e.status);
  } catch (const std::exception& e) {
    return context(errors->translate("connecting to the other ranks", e.what()));
  }
  // Gloo's messages name a connection by the peer's address as this rank's pair saw it, which is
  // either the address of the peer's end of the socket (the peer publishes it below) or, when the
  // peer connected before this rank called connect on the pair, the address the peer listened on
  // first (Gloo's connect overwrites the accepted one with it; it is in Gloo's own rendezvous key).
  // Both map back to the peer's rank.
  for (int q = 0; q < env.world_size; ++q) {
    if (q == env.rank) continue;
    Status s = store->set(fmt::format("{}pair/{}/{}", prefix, env.rank, q),
                          ctx->getPair(q)->address().str());
    if (!s.is_ok()) return context(s);
  }
  for (int q = 0; q < env.world_size; ++q) {
    if (q == env.rank) continue;
    Result<std::string> addr = store->get(fmt::format("{}pair/{}/{}", prefix, q, env.rank));
    if (!addr.is_ok()) return context(addr.status());
    ZT_LOG_DEBUG("gloo: rank {} sees rank {} at {}", env.rank, q, *addr);
    errors->add_peer_address(*addr, q);
    // Gloo's key "<q>": q's listening address for each peer, in rank order without q.
    Result<std::string> all = store->get(fmt::format("{}{}", prefix, q));
    if (!all.is_ok()) return context(all.status());
    const size_t size = all->size() / static_cast<size_t>(env.world_size - 1);
    const size_t slot = static_cast<size_t>(env.rank > q ? env.rank - 1 : env.rank);
    if (size > 0 && all->size() == size * static_cast<size_t>(env.world_size - 1)) {
      std::vector<char> bytes(all->begin() + static_cast<std::ptrdiff_t>(slot * size),
                              all->begin() + static_cast<std::ptrdiff_t>((slot + 1) * size));
      try {
        errors->add_peer_address(gloo::transport::tcp::Address(bytes).str(), q);
      } catch (const std::exception& e) {
        ZT_LOG_DEBUG("gloo: cannot read rank {}'s listening address: {}", q, e.what());
      }
    }
  }
  // Every rank is past its last store read once all arrive here, so rank 0 may stop serving the
  // store any time after (a rank that exits early must not strand the others' rendezvous).
  try {
    gloo::BarrierOptions opts(ctx);
    opts.setTag(0);
    opts.setTimeout(env.timeout);
    gloo::barrier(opts);
  } catch (const std::exception& e) {
    return context(errors->translate("the barrier that ends creation", e.what()));
  }
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(env, std::move(store), std::move(ctx), std::move(errors), prefix));
}

Result<std::unique_ptr<Communicator>> gloo_communicator_create(const DistEnv& env,
                                                               std::shared_ptr<TcpStore> store) {
  return gloo_create(env, std::move(store), kKeyPrefix);
}

}  // namespace zt
