// `zt`: the ZeroTrain command-line tool. One binary, subcommands as DESIGN.md lists them.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"
#include "zt/launcher/heartbeat.h"
#include "zt/build_config.h"
#include "zt/core/device.h"
#include "zt/launcher/launch.h"

namespace {

constexpr const char* kUsage = R"(zt — ZeroTrain: DeepSpeed-compatible training, one native binary.

Usage: zt <command> [options]

Commands:
  train     Train a model (named size or Hugging Face directory) from a ds_config.json
  eval      Loss and perplexity of a model on a token file or JSON Lines (zt eval --help)
  generate  Generate from a model with a KV cache (zt generate --help)
  launch    Start a multi-process job, like `deepspeed` (zt launch --help)
  config    Check a ds_config.json and print it fully resolved (zt config check FILE)
  data      Make token files from text (zt data prepare FILES... -o OUT)
  tokenize  Text to ids and back with a tokenizer.json, as JSON Lines (zt tokenize --help)
  report    This machine and build in one screen, problems with their fixes (like ds_report)
  estimate  Memory per GPU and node for a model, stage and batch (zt estimate --help)
  tune      Autotune the ZeRO stage and micro-batch of a zt train command (zt tune --help)
  ckpt      Consolidate or inspect checkpoints (zt ckpt to-fp32 DIR OUT, zt ckpt inspect DIR)

Options:
  --version   Print the version and build facts
  --help      This help
)";

int print_version() {
  std::printf("zt %s (CUDA %s, %d GPU(s) visible)\n", ZT_VERSION_STRING,
              zt::cuda_built() ? "built" : "not built", zt::cuda_device_count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP threads that spin while OpenBLAS's own threads run halve CPU training speed on small
  // machines; libgomp reads its wait policy only when it loads, so set it and start again (once).
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  // Launchers (zt launch, deepspeed) put --local_rank=N right after the program, before its
  // arguments: `zt --local_rank=0 train ...`. ZeroTrain reads LOCAL_RANK from the environment.
  while (!args.empty() && args[0].starts_with("--local_rank")) {
    args.erase(args.begin(), args.begin() + (args[0] == "--local_rank" && args.size() > 1 ? 2 : 1));
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") return print_version();
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  int rc = -1;
  try {
    if (cmd == "train") {
      zt::launcher::heartbeat_start_from_env();  // a rank of `zt launch`: it beats
      rc = zt::cli::cmd_train(rest);
    }
    if (cmd == "config") rc = zt::cli::cmd_config(rest);
    if (cmd == "data") rc = zt::cli::cmd_data(rest);
    if (cmd == "ckpt") rc = zt::cli::cmd_ckpt(rest);
    if (cmd == "generate") rc = zt::cli::cmd_generate(rest);
    if (cmd == "eval") rc = zt::cli::cmd_eval(rest);
    if (cmd == "tokenize") rc = zt::cli::cmd_tokenize(rest);
    if (cmd == "report") rc = zt::cli::cmd_report(rest);
    if (cmd == "estimate") rc = zt::cli::cmd_estimate(rest);
    if (cmd == "tune") rc = zt::cli::cmd_tune(rest);
    if (cmd == "launch") rc = zt::launcher::launch_main(rest, zt::cli::launch_autotune);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt: error: %s\n", e.what());
    return 1;
  }
  if (rc >= 0) {
    // What a command printed must have reached its destination (`zt config check > /dev/full`).
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "zt: error: writing the standard output: %s\n", std::strerror(errno));
      return rc == 0 ? 1 : rc;
    }
    return rc;
  }
  std::fprintf(stderr, "zt: unknown command '%s'; commands: train, eval, generate, launch, config, data, tokenize, report, estimate, tune, ckpt (see zt --help)\n",
               cmd.c_str());
  return 2;
}
