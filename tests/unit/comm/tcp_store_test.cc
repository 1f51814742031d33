// Tests of the rendezvous store (src/zt/comm/store/tcp_store.h) over real sockets on 127.0.0.1:
// set/get/wait/add/check/delete between clients, a get that waits for a later set, a client that
// starts before the server, a wrong job token, timeouts, and a server that goes away.
#include "zt/comm/store/tcp_store.h"

#include <gtest/gtest.h>

#include "common/test_util.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace zt {
namespace {

using namespace std::chrono_literals;

// A port that was free a moment ago (bind to port 0, read it, close).
using testing::free_tcp_port;

// The value, or the error text (so a failed call shows its message in the comparison).
std::string text(const Result<std::string>& r) {
  return r.is_ok() ? r.value() : "<error: " + r.status().message() + ">";
}

std::unique_ptr<TcpStore> client(int port, std::string token = "job",
                                 std::chrono::milliseconds timeout = 5s) {
  auto c = TcpStore::connect(
      {.host = "127.0.0.1", .port = port, .token = std::move(token), .timeout = timeout});
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

std::unique_ptr<TcpStore> serving(std::string token = "job",
                                  std::chrono::milliseconds timeout = 5s) {
  auto s = TcpStore::connect({.host = "127.0.0.1",
                              .port = 0,
                              .token = std::move(token),
                              .timeout = timeout,
                              .rank = 0,
                              .role = StoreRole::kServerAndClient});
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

TEST(TcpStore, SetGetAddCheckDeleteAcrossClients) {
  auto server = serving();
  ASSERT_NE(server, nullptr);
  auto other = client(server->port());
  ASSERT_NE(other, nullptr);

  ASSERT_TRUE(server->set("a", std::string("x\0y", 3)).is_ok());
  Result<std::string> v = other->get("a");
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(*v, std::string("x\0y", 3));  // values are bytes, not C strings

  Result<int64_t> n = other->add("count", 5);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(*n, 5);
  n = server->add("count", -2);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 3);
  EXPECT_EQ(*server->get("count"), "3");  // counters are decimal text

  EXPECT_TRUE(*other->check({"a", "count"}));
  EXPECT_FALSE(*other->check({"a", "missing"}));
  EXPECT_TRUE(*other->delete_key("a"));
  EXPECT_FALSE(*other->delete_key("a"));
  EXPECT_FALSE(*server->check({"a"}));
}

TEST(TcpStore, GetWaitsForALaterSet) {
  auto server = serving();
  ASSERT_NE(server, nullptr);
  auto waiter = client(server->port());
  ASSERT_NE(waiter, nullptr);
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(server->set("late", "value").is_ok());
    EXPECT_TRUE(server->set("late2", "v2").is_ok());
  });
  auto start = std::chrono::steady_clock::now();
  Result<std::string> v = waiter->get("late");
  EXPECT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(text(v), "value");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_TRUE(waiter->wait({"late", "late2"}).is_ok());
  setter.join();
}

TEST(TcpStore, ClientStartedBeforeServerConnectsWhenItComes) {
  int port = free_tcp_port();
  std::unique_ptr<TcpStore> server;
  std::thread late_server([&] {
    std::this_thread::sleep_for(300ms);
    auto s = TcpStore::connect({.host = "127.0.0.1",
                                .port = port,
                                .token = "job",
                                .timeout = 5s,
                                .rank = 0,
                                .role = StoreRole::kServerAndClient});
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    server = std::move(s).value();
    EXPECT_TRUE(server->set("k", "v").is_ok());
  });
  auto c = client(port);  // retries until the server is up
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(text(c->get("k")), "v");
  late_server.join();
}

TEST(TcpStore, WrongJobTokenIsRefused) {
  auto server = serving("job-A");
  ASSERT_NE(server, nullptr);
  auto stale = TcpStore::connect(
      {.host = "127.0.0.1", .port = server->port(), .token = "job-B", .timeout = 2s});
  ASSERT_FALSE(stale.is_ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(stale.status().message().find("another job"), std::string::npos)
      << stale.status().message();
  // The server keeps serving its own job.
  auto good = client(server->port(), "job-A");
  ASSERT_NE(good, nullptr);
  EXPECT_TRUE(good->set("still", "fine").is_ok());
}

TEST(TcpStore, GetOfAMissingKeyTimesOutNamingIt) {
  auto server = serving("job", 300ms);
  ASSERT_NE(server, nullptr);
  auto start = std::chrono::steady_clock::now();
  Result<std::string> v = server->get("never-set");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(v.is_ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("never-set"), std::string::npos) << v.status().message();
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  // The connection is re-made after a timeout: the store still works.
  EXPECT_TRUE(server->set("after", "timeout").is_ok());
  EXPECT_EQ(text(server->get("after")), "timeout");
  Status w = server->wait({"after", "nope"}, 200ms);
  EXPECT_EQ(w.code(), StatusCode::kTimeout);
}

TEST(TcpStore, NoServerTimesOut) {
  int port = free_tcp_port();
  auto start = std::chrono::steady_clock::now();
  auto c = TcpStore::connect({.host = "127.0.0.1", .port = port, .token = "t", .timeout = 500ms});
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find("MASTER_ADDR"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(TcpStore, ServerGoneIsReported) {
  auto server = serving();
  ASSERT_NE(server, nullptr);
  auto c = client(server->port());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->set("x", "1").is_ok());
  server.reset();  // rank 0 exits
  Result<std::string> v = c->get("x", 1s);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find("rank 0"), std::string::npos) << v.status().message();
}

TEST(TcpStore, PortInUseIsAClearError) {
  auto first = serving();
  ASSERT_NE(first, nullptr);
  auto second = TcpStoreServer::start(first->port(), "other");
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status().message();
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// A one-machine job (MASTER_ADDR loopback) serves on loopback only, not on every interface.
TEST(TcpStoreServer, BindsTheJobsAddressNotEveryInterface) {
  auto srv = TcpStoreServer::start(0, "job", "127.0.0.1");
  ASSERT_TRUE(srv.is_ok()) << srv.status().message();
  EXPECT_EQ((*srv)->bound_address(), "127.0.0.1");
  auto localhost = TcpStoreServer::start(0, "job", "localhost");
  ASSERT_TRUE(localhost.is_ok()) << localhost.status().message();
  const std::string& b = (*localhost)->bound_address();
  EXPECT_TRUE(b == "127.0.0.1" || b == "::1") << b;
  // A client still reaches it.
  auto c = TcpStore::connect({.host = "127.0.0.1", .port = (*srv)->port(), .token = "job",
                              .timeout = std::chrono::seconds(5)});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE((*c)->set("k", "v").is_ok());
}

// Rank 0 of a multi-node job serves on MASTER_ADDR, a non-loopback address of this machine; its
// own client must reach the store there (it is not listening on 127.0.0.1).
TEST(TcpStore, RankZeroReachesItsStoreOnANonLoopbackMasterAddr) {
  ifaddrs* ifs = nullptr;
  ASSERT_EQ(getifaddrs(&ifs), 0);
  std::string addr;
  for (ifaddrs* i = ifs; i != nullptr && addr.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    addr = text;
  }
  freeifaddrs(ifs);
  if (addr.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  auto s = TcpStore::connect({.host = addr,
                              .port = 0,
                              .token = "job",
                              .timeout = 5s,
                              .rank = 0,
                              .role = StoreRole::kServerAndClient});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ((*s)->address(), addr + ":" + std::to_string((*s)->port()));
  ASSERT_TRUE((*s)->set("k", "v").is_ok());
  auto other = TcpStore::connect({.host = addr, .port = (*s)->port(), .token = "job", .timeout = 5s});
  ASSERT_TRUE(other.is_ok()) << other.status().message();
  EXPECT_EQ(text((*other)->get("k")), "v");
}

// A connection that sends half a frame and then nothing is closed by the server (10 s), while a
// well-behaved client is served meanwhile.
TEST(TcpStoreServer, StalledPartialFrameIsClosed) {
  auto srv = TcpStoreServer::start(0, "job", "127.0.0.1");
  ASSERT_TRUE(srv.is_ok());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>((*srv)->port()));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const char half[] = {100, 0, 0, 0, 1, 2};  // announces 100 bytes, sends 2
  ASSERT_EQ(send(fd, half, sizeof(half), 0), static_cast<ssize_t>(sizeof(half)));
  auto c = TcpStore::connect({.host = "127.0.0.1", .port = (*srv)->port(), .token = "job",
                              .timeout = std::chrono::seconds(5)});
  ASSERT_TRUE(c.is_ok());
  EXPECT_TRUE((*c)->set("k", "v").is_ok());
  timeval tv{.tv_sec = 20, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const auto t0 = std::chrono::steady_clock::now();
  char b;
  const ssize_t n = recv(fd, &b, 1, 0);  // 0: the server closed it
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  EXPECT_EQ(n, 0);
  EXPECT_GT(waited, 5.0);
  EXPECT_LT(waited, 15.0);
}

}  // namespace
}  // namespace zt
