// How a rank runs PROGRAM, as DeepSpeed's launch.py and runners run the user script (reference
// §5), adapted to a launcher that is not itself Python: a PROGRAM ending in ".py" runs as
// `python3 -u PROGRAM` (DeepSpeed runs every script under its own interpreter, unbuffered);
// --module runs `python3 -u -m PROGRAM`; --no_python runs PROGRAM as given, a .py file included;
// any other PROGRAM (`zt`, a binary, a script with a #! line) runs directly, found as execvp finds
// it. python3 is the one on PATH (an activated virtualenv's). Each rank's argv is the command's
// argv, then `--local_rank=N` unless --no_local_rank, then PROGRAM's arguments: the flag right
// after the script or module name, where DeepSpeed's launch.py puts it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {

enum class ProgramMode : unsigned char {
  kDefault,   // ".py" under python3 -u, anything else directly
  kModule,    // --module: python3 -u -m PROGRAM
  kNoPython,  // --no_python: PROGRAM directly, whatever its name
};

// The mode for --module / --no_python; both together is DeepSpeed's error.
Result<ProgramMode> program_mode(bool module, bool no_python);

struct ProgramCommand {
  std::string exec_path;  // the file to execute on this machine (python3 resolved, or PROGRAM)
  std::vector<std::string> argv;  // {"python3", "-u", ["-m",] PROGRAM} or {PROGRAM}
  bool python = false;            // runs under python3
};

// The command for `program` in `mode`. `path_env` is the PATH that finds python3 or PROGRAM;
// `cwd` is the working directory the ranks start in (a relative .py path is checked there, as
// python3 will open it). Errors say what is missing and how to fix it (python3's Debian package,
// a script that is not there).
Result<ProgramCommand> program_command(std::string_view program, ProgramMode mode,
                                       std::string_view path_env, const std::string& cwd);

// argv of one rank: `command.argv`, then `--local_rank=N` when `local_rank` >= 0 (pass -1 for
// --no_local_rank), then `program_args`.
std::vector<std::string> program_rank_argv(const ProgramCommand& command, int local_rank,
                                           const std::vector<std::string>& program_args);

}  // namespace zt::launcher
