// Before starting any rank, check that rank 0 will be able to listen on MASTER_PORT: a port held
// by a previous run is otherwise found only when every rank times out at the rendezvous. The check
// binds a TCP socket (SO_REUSEADDR, so connections in TIME_WAIT do not count) on all interfaces,
// as the rendezvous store does, and closes it again.
#pragma once

#include <string>

#include "zt/core/status.h"

namespace zt::launcher {

// Ok when `port` can be bound now. Otherwise the error names the process listening on it (when
// /proc shows it) and says what to do: stop that process or pass --master_port.
Status master_port_check(int port);

// "pid 1234 (python train.py ...)" for the process listening on TCP `port`, from /proc/net/tcp
// and /proc/<pid>/fd; empty when it cannot be found (e.g. another user's process).
std::string port_listener_describe(int port);

}  // namespace zt::launcher
