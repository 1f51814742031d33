// The `zt` subcommands. Each takes the arguments after its name and returns the exit code;
// user mistakes print one line ("zt: error: ...") and return non-zero.
#pragma once

#include <string>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {
struct LaunchOptions;
}  // namespace zt::launcher

namespace zt::cli {

using Args = std::vector<std::string>;

int cmd_train(const Args& args);
int cmd_config(const Args& args);
int cmd_data(const Args& args);
int cmd_ckpt(const Args& args);
int cmd_generate(const Args& args);
int cmd_eval(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_report(const Args& args);
int cmd_estimate(const Args& args);
int cmd_tune(const Args& args);
// `zt launch --autotuning tune|run ...` (the launcher's AutotuneEntry).
int launch_autotune(const launcher::LaunchOptions& options, const Args& args);

// Prints "zt: error: <message>" to stderr and returns 1 (2 for usage errors).
int fail(const Status& status);

}  // namespace zt::cli
