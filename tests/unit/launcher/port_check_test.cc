// The master-port check against the kernel: a port this test listens on must be reported busy,
// naming this very process; once closed it must be free.
#include "zt/launcher/port_check.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace zt::launcher {
namespace {

// Listens on 127.0.0.1:<ephemeral>; returns the fd and sets *port.
int listener_open(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(LauncherPortCheck, BusyPortNamesTheListener) {
  int port = 0;
  int fd = listener_open(&port);
  Status s = master_port_check(port);
  ASSERT_FALSE(s.is_ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("--master_port " + std::to_string(port) + " is already in use"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("pid " + std::to_string(getpid())), std::string::npos) << m;
  EXPECT_EQ(port_listener_describe(port).rfind("pid " + std::to_string(getpid()), 0), 0u);
  close(fd);
  EXPECT_TRUE(master_port_check(port).is_ok()) << master_port_check(port).message();
  EXPECT_EQ(port_listener_describe(port), "");
}

}  // namespace
}  // namespace zt::launcher
