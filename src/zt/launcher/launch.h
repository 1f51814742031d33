// `zt launch [FLAGS] PROGRAM [ARGS...]`: DeepSpeed's `deepspeed` launcher for one machine
// (reference §5; user guide docs/launcher.md). The CLI (apps/zt) calls launch_main with the
// arguments after `zt launch`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "zt/launcher/launch_options.h"

namespace zt::launcher {

// `--autotuning tune|run`: the autotuner (tools/autotune.h) sits above the launcher, so the CLI
// passes it in. It gets the parsed options and the arguments after `zt launch`, and returns the
// exit code.
using AutotuneEntry =
    std::function<int(const LaunchOptions& options, const std::vector<std::string>& args)>;

// Parses the flags, decides the ranks, checks everything that can be checked before starting
// (flags, hostfile, GPUs, PROGRAM, master port, log folder), runs the ranks and supervises them.
// Returns the process exit code: 0 when every rank exits 0; the first failing rank's code
// (128 + signal when it was killed); 128 + signal when the launcher itself was interrupted; 2 for
// a usage error and 1 for any other error found before starting. Errors and the failure line go
// to stderr; --help prints the usage to stdout.
int launch_main(const std::vector<std::string>& args, const AutotuneEntry& autotune = nullptr);

}  // namespace zt::launcher

namespace zt {
using launcher::launch_main;  // the CLI's entry point, `zt::launch_main(args)`
}  // namespace zt
