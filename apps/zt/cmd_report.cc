// `zt report`: this machine and this build in one screen, each problem one line with its fix
// (tools/report.h). DeepSpeed's ds_report.
#include <cstdio>

#include "cli_args.h"
#include "commands.h"
#include "zt/tools/report.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt report [--json]

Shows ZeroTrain's version and build (CUDA architectures), the GPUs with their memory and the
driver, CUDA, cuBLAS and NCCL versions, the CPU (which CPU Adam clone runs), OpenBLAS and Gloo,
host memory, the locked-memory limit, huge pages, /dev/shm, NUMA nodes, network interfaces and
the launchers found (ssh, pdsh, mpirun, srun), then each problem found as one line with its fix.
Exits 0 either way.

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--json", FlagKind::kSwitch, "one JSON object instead of the text"},
    {"--help", FlagKind::kSwitch, "this help"},
};

}  // namespace

int cmd_report(const Args& args) {
  auto parsed = parse_command("zt report", kUsage, kFlags, args);
  if (!parsed) return fail(parsed.status());
  if (!parsed->has_value()) return 0;
  const tools::Report r = tools::report_collect();
  if ((*parsed)->has("--json")) {
    std::printf("%s\n", tools::report_json(r).dump(2).c_str());
  } else {
    std::fputs(tools::report_text(r).c_str(), stdout);
  }
  return 0;
}

}  // namespace zt::cli
