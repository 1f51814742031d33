// The rank's side of the launcher's heartbeat (process_group.h): when `zt launch` started this
// process it passes the write end of a pipe in ZT_HEARTBEAT_FD; a thread writes the current step
// (8 bytes) to it every second. A rank that is stopped (SIGSTOP), frozen or starved stops
// beating, and the launcher stops the job after ZT_HEARTBEAT_TIMEOUT_S (default 60 s) with a
// message naming the rank, its host and its last step, instead of every other rank waiting out
// the 30-minute collective timeout. (A rank whose main thread hangs but whose process runs still
// beats: the collective timeout covers that.)
#pragma once

#include <cstdint>

namespace zt::launcher {

// Starts the heartbeat thread when ZT_HEARTBEAT_FD names an open pipe; else does nothing.
void heartbeat_start_from_env();
// The step the next heartbeats report.
void heartbeat_set_step(int64_t step);

}  // namespace zt::launcher
