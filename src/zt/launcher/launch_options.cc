// `zt launch` flag parsing (see launch_options.h). Every flag is declared once, in kFlags: the
// parser and the --help text both come from that table.
#include "zt/launcher/launch_options.h"

#include <charconv>
#include <string_view>

namespace zt::launcher {
namespace {

enum class FlagKind : unsigned char { kSwitch, kValue };

// How a DeepSpeed flag is honoured by `zt launch` on one machine.
enum class FlagSupport : unsigned char {
  kYes,        // does what DeepSpeed does
  kNoOp,       // only matters for several machines: accepted and ignored on one
  kMultiNode,  // refused: needs a multi-node runner (a later ZeroTrain issue)
  kRefused,    // refused with an explanation (no Python, no autotuner/elasticity here)
};

using FlagApply = Status (*)(LaunchOptions& o, std::string_view flag, std::string_view value);

struct FlagDef {
  const char* name;   // "--hostfile"
  const char* alias;  // "-H", or nullptr
  FlagKind kind;
  FlagSupport support;
  const char* metavar;
  const char* help;
  FlagApply apply;
};

Result<int> int_parse(std::string_view flag, std::string_view value, int lo, int hi) {
  std::string_view digits = value;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  int v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return invalid_argument("argument {}: invalid int value: '{}'", flag, value);
  }
  if (v < lo || v > hi) {
    return invalid_argument("argument {}: {} is out of range [{}, {}]", flag, value, lo, hi);
  }
  return v;
}

// --num_nodes/--num_gpus/--num_procs: -1 means "not given", as DeepSpeed's default.
Status count_set(int* field, std::string_view flag, std::string_view value) {
  ZT_ASSIGN_OR_RETURN(int v, int_parse(flag, value, -1, 1 << 20));
  if (v == 0) {
    return invalid_argument(
        "argument {}: must be at least 1 (for ranks without a GPU, pass "
        "--num_procs N)",
        flag);
  }
  *field = v;
  return Status::ok();
}

constexpr FlagDef kFlags[] = {
    {"--hostfile", "-H", FlagKind::kValue, FlagSupport::kYes, "FILE",
     "hostfile (MPI style, 'HOST slots=N' lines); default /job/hostfile when it exists. Only "
     "this machine's names (localhost, 127.0.0.1, its hostname) for now",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.hostfile = std::string(v);
       o.hostfile_given = true;
       return Status::ok();
     }},
    {"--include", "-i", FlagKind::kValue, FlagSupport::kYes, "SPEC",
     "use only these slots: NAME[:SLOT[,SLOT...]][@NAME...], e.g. localhost:0,2",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.include = std::string(v);
       return Status::ok();
     }},
    {"--exclude", "-e", FlagKind::kValue, FlagSupport::kYes, "SPEC",
     "use every slot except these (same grammar as --include; the two are exclusive)",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.exclude = std::string(v);
       return Status::ok();
     }},
    {"--num_nodes", nullptr, FlagKind::kValue, FlagSupport::kYes, "N",
     "number of machines (only 1 for now)",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       return count_set(&o.num_nodes, f, v);
     }},
    {"--num_gpus", "--num_accelerators", FlagKind::kValue, FlagSupport::kYes, "N",
     "GPUs to use on the machine: ids 0..N-1",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       return count_set(&o.num_gpus, f, v);
     }},
    {"--num_procs", nullptr, FlagKind::kValue, FlagSupport::kYes, "N",
     "ZeroTrain: run N CPU ranks (no GPU needed; CUDA_VISIBLE_DEVICES is left as it is)",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       return count_set(&o.num_procs, f, v);
     }},
    {"--master_port", nullptr, FlagKind::kValue, FlagSupport::kYes, "PORT",
     "rendezvous port of rank 0 (default 29500); checked to be free before starting",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       ZT_ASSIGN_OR_RETURN(o.master_port, int_parse(f, v, 1, 65535));
       return Status::ok();
     }},
    {"--master_addr", nullptr, FlagKind::kValue, FlagSupport::kYes, "ADDR",
     "address of rank 0 (default 127.0.0.1 on one machine)",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.master_addr = std::string(v);
       return Status::ok();
     }},
    {"--launcher", nullptr, FlagKind::kValue, FlagSupport::kYes, "NAME",
     "runner: 'local' (one machine). pdsh, openmpi, mvapich, slurm, mpich, impi come with "
     "multi-node support",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.launcher = std::string(v);
       o.launcher_given = true;
       return Status::ok();
     }},
    {"--launcher_args", nullptr, FlagKind::kValue, FlagSupport::kMultiNode, "ARGS",
     "arguments for a multi-node runner", nullptr},
    {"--no_local_rank", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "do not pass --local_rank=N to PROGRAM",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.no_local_rank = true;
       return Status::ok();
     }},
    {"--no_python", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "accepted; always true here: PROGRAM is run directly, as any executable",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.no_python = true;
       return Status::ok();
     }},
    {"--module", nullptr, FlagKind::kSwitch, FlagSupport::kRefused, nullptr,
     "refused: there is no Python interpreter to pass -m to (see below)", nullptr},
    {"--save_pid", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "write this launcher's pid to /tmp/<pid>.deepspeed while the job runs",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.save_pid = true;
       return Status::ok();
     }},
    {"--enable_each_rank_log", nullptr, FlagKind::kValue, FlagSupport::kYes, "DIR",
     "write each rank's stdout+stderr to DIR/<timestamp>_rank<R>.log instead of the terminal",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.each_rank_log_dir = std::string(v);
       return Status::ok();
     }},
    {"--bind_cores_to_rank", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "split the physical cores (or --bind_core_list) evenly among ranks; pin each rank to its "
     "share and set OMP_NUM_THREADS to its size",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.bind_cores_to_rank = true;
       return Status::ok();
     }},
    {"--bind_core_list", nullptr, FlagKind::kValue, FlagSupport::kYes, "LIST",
     "cores for --bind_cores_to_rank, e.g. 1,3-5,7 (ascending, no overlap)",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.bind_core_list = std::string(v);
       return Status::ok();
     }},
    {"--no_ssh_check", nullptr, FlagKind::kSwitch, FlagSupport::kNoOp, nullptr,
     "accepted; no ssh is used on one machine", nullptr},
    {"--ssh_port", nullptr, FlagKind::kValue, FlagSupport::kNoOp, "PORT",
     "accepted; no ssh is used on one machine", nullptr},
    {"--no_ssh", nullptr, FlagKind::kSwitch, FlagSupport::kMultiNode, nullptr,
     "per-node launch without ssh", nullptr},
    {"--node_rank", nullptr, FlagKind::kValue, FlagSupport::kMultiNode, "N",
     "this node's index with --no_ssh", nullptr},
    {"--force_multi", nullptr, FlagKind::kSwitch, FlagSupport::kMultiNode, nullptr,
     "use the multi-node runner for one node", nullptr},
    {"--autotuning", nullptr, FlagKind::kValue, FlagSupport::kYes, "tune|run",
     "tune: find the fastest ZeRO stage and micro-batch for PROGRAM's ds_config with short "
     "measured runs (the config's autotuning block; docs/autotuning.md); run: tune, then train "
     "with the best",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       if (v != "tune" && v != "run") {
         return invalid_argument("argument {}: invalid choice: '{}' (choose from 'tune', 'run')",
                                 f, v);
       }
       o.autotuning = std::string(v);
       return Status::ok();
     }},
    {"--elastic_training", nullptr, FlagKind::kSwitch, FlagSupport::kRefused, nullptr,
     "refused: elastic training is not supported", nullptr},
    {"--min_elastic_nodes", nullptr, FlagKind::kValue, FlagSupport::kRefused, "N",
     "refused: elastic training is not supported", nullptr},
    {"--max_elastic_nodes", nullptr, FlagKind::kValue, FlagSupport::kRefused, "N",
     "refused: elastic training is not supported", nullptr},
};

const FlagDef* flag_find(std::string_view name) {
  for (const FlagDef& f : kFlags) {
    if (name == f.name || (f.alias != nullptr && name == f.alias)) return &f;
  }
  return nullptr;
}

Status flag_refusal(const FlagDef& f) {
  std::string_view name = f.name;
  if (name == "--module") {
    return invalid_argument(
        "--module: zt launch runs PROGRAM directly as an executable (DeepSpeed's --no_python is "
        "implied), so there is no Python interpreter to pass -m to. Run the module through "
        "python yourself: `zt launch --no_local_rank python -u -m MODULE ARGS` (each rank reads "
        "LOCAL_RANK from its environment)");
  }
  if (f.support == FlagSupport::kMultiNode) {
    return invalid_argument(
        "{}: multi-node launching (ssh/pdsh/openmpi/slurm runners) is a later ZeroTrain feature; "
        "zt launch runs the ranks of one machine for now",
        name);
  }
  return invalid_argument("{} is not supported by zt launch ({})", name, f.help);
}

// Word-wraps `text` at `width` columns, each line starting with `indent`.
std::string text_wrap(std::string_view text, std::string_view indent, size_t width) {
  std::string out;
  std::string line(indent);
  while (!text.empty()) {
    size_t space = text.find(' ');
    std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent);
    }
    if (line.size() > indent.size()) line += ' ';
    line += word;
  }
  return out + line + "\n";
}

}  // namespace

Result<LaunchOptions> launch_options_parse(const std::vector<std::string>& args) {
  LaunchOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg.size() < 2 || arg.front() != '-') break;  // PROGRAM ("-" alone is a name too)

    // Split "--flag=value", and "-Hvalue" for one-letter aliases.
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (arg.starts_with("--")) {
      size_t eq = arg.find('=');
      if (eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      inline_value = arg.substr(2);
    }
    const FlagDef* flag = flag_find(name);
    if (flag == nullptr) {
      return invalid_argument(
          "unrecognized argument: {} (flags go before PROGRAM; see zt launch "
          "--help)",
          arg);
    }
    std::string_view value;
    if (flag->kind == FlagKind::kValue) {
      if (inline_value) {
        value = *inline_value;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return invalid_argument("argument {}: expected one argument ({})", name, flag->metavar);
      }
    } else if (inline_value) {
      return invalid_argument("argument {}: ignored explicit argument '{}' (it is a switch)", name,
                              *inline_value);
    }
    if (flag->support == FlagSupport::kMultiNode || flag->support == FlagSupport::kRefused) {
      return flag_refusal(*flag);
    }
    if (flag->apply != nullptr) ZT_RETURN_IF_ERROR(flag->apply(o, name, value));
  }
  if (i >= args.size()) {
    return invalid_argument(
        "the following arguments are required: PROGRAM (zt launch [FLAGS] "
        "PROGRAM [ARGS...]; see zt launch --help)");
  }
  o.program = args[i];
  o.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return o;
}

std::string launch_usage() {
  std::string out =
      "usage: zt launch [FLAGS] PROGRAM [ARGS...]\n"
      "\n"
      "Runs PROGRAM once per rank on this machine, as DeepSpeed's `deepspeed` launcher does.\n"
      "Flags come before PROGRAM; PROGRAM and everything after it are passed on untouched,\n"
      "with --local_rank=N inserted as the first argument unless --no_local_rank is given.\n"
      "Ranks: the hostfile's slots, else --num_procs N CPU ranks, else every visible GPU.\n"
      "\n"
      "flags:\n";
  for (const FlagDef& f : kFlags) {
    if (f.support == FlagSupport::kMultiNode || f.support == FlagSupport::kRefused) continue;
    std::string names = f.alias != nullptr && f.alias[1] != '-'
                            ? std::string(f.alias) + ", " + f.name
                            : std::string(f.name);
    if (f.alias != nullptr && f.alias[1] == '-') names += std::string(", ") + f.alias;
    if (f.metavar != nullptr) names += std::string(" ") + f.metavar;
    out += "  " + names + "\n" + text_wrap(f.help, "      ", 96);
  }
  out +=
      "  -h, --help\n      print this text\n"
      "\n"
      "Not yet supported (multi-node): --launcher_args, --no_ssh, --node_rank, --force_multi,\n"
      "and --launcher other than 'local'. Refused: --module (PROGRAM is any executable; run\n"
      "`python -u -m MODULE` yourself with --no_local_rank), --elastic_training.\n"
      "\n"
      "Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE,\n"
      "MASTER_ADDR, MASTER_PORT, ZT_JOB_TOKEN and (GPU ranks) CUDA_VISIBLE_DEVICES = the selected\n"
      "GPU ids. When one rank fails, every other rank is stopped (SIGTERM, then SIGKILL after\n"
      "ZT_LAUNCH_GRACE_S seconds, default 30) and zt launch exits with that rank's code.\n";
  return out;
}

}  // namespace zt::launcher
