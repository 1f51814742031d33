// Line relay: what a launcher does with the output of processes it reads through pipes. Bytes
// are cut into lines; each complete line is written to `out_fd` with a prefix ("[rank 3] ") in
// one write(2), so lines of different processes sharing a terminal or an ssh channel never
// interleave mid-line (a write of at most PIPE_BUF bytes to a pipe is atomic). A partial line
// waits for its end; at EOF it is written with a '\n' added.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace zt::launcher {

class LineRelay {
 public:
  // `intercept` (optional) sees every complete line (without '\n') first; when it returns true
  // the line is consumed and not written (a marker line meant for the launcher, not the user).
  using Intercept = std::function<bool(std::string_view line)>;

  LineRelay(std::string prefix, int out_fd, Intercept intercept = nullptr);

  // Appends `data`; writes each line it completes.
  void feed(std::string_view data);
  // End of the stream: writes a partial last line with a '\n'.
  void finish();

 private:
  void line_emit(std::string_view line);

  std::string prefix_;
  int out_fd_;
  Intercept intercept_;
  std::string pending_;  // the start of a line whose '\n' has not come yet
};

// Writes all of `data` to `fd`, retrying after EINTR and partial writes; false on any other error
// (a closed terminal or pipe: the output is dropped, the job goes on).
bool write_all(int fd, std::string_view data);

}  // namespace zt::launcher
