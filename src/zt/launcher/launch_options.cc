// `zt launch` flag parsing (see launch_options.h). Every flag is declared once, in kFlags: the
// parser and the --help text both come from that table.
#include "zt/launcher/launch_options.h"

#include <charconv>
#include <string_view>

#include "zt/launcher/shell_quote.h"

namespace zt::launcher {
namespace {

enum class FlagKind : unsigned char { kSwitch, kValue };

// How a flag is honoured by `zt launch`.
enum class FlagSupport : unsigned char {
  kYes,      // does what DeepSpeed does
  kRefused,  // refused with an explanation (no elasticity here)
  kHidden,   // the launcher talking to itself on another node: parsed, not in --help
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
     "hostfile (MPI style, 'HOST slots=N' lines); default /job/hostfile when it exists. The "
     "hosts run in file order (it fixes the ranks); more than one host is a multi-node job",
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
     "use the first N hosts of the hostfile",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       return count_set(&o.num_nodes, f, v);
     }},
    {"--num_gpus", "--num_accelerators", FlagKind::kValue, FlagSupport::kYes, "N",
     "GPUs to use on each host: ids 0..N-1",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       return count_set(&o.num_gpus, f, v);
     }},
    {"--num_procs", nullptr, FlagKind::kValue, FlagSupport::kYes, "N",
     "ZeroTrain: run N CPU ranks (no GPU needed; CUDA_VISIBLE_DEVICES is left as it is); with "
     "-H, N CPU ranks on each host (at most its slots=)",
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
     "address of rank 0 (default 127.0.0.1 on one machine; on several, the first address "
     "`hostname -I` prints on the first host, as DeepSpeed finds it)",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.master_addr = std::string(v);
       return Status::ok();
     }},
    {"--launcher", nullptr, FlagKind::kValue, FlagSupport::kYes, "NAME",
     "runner: 'local' (one machine, the default there), 'ssh' (the default for several hosts: "
     "one ssh per node from zt launch itself), 'pdsh', 'openmpi', 'mpich', 'impi', 'mvapich', "
     "'slurm'",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.launcher = std::string(v);
       o.launcher_given = true;
       return Status::ok();
     }},
    {"--launcher_args", nullptr, FlagKind::kValue, FlagSupport::kYes, "ARGS",
     "extra arguments for the runner's command (ssh, pdsh, mpirun, srun), one string split as a "
     "shell would (Python's shlex.split), e.g. \"-F /path/ssh_config\"",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       ZT_ASSIGN_OR_RETURN(o.launcher_args, shell_split(v, f));
       return Status::ok();
     }},
    {"--no_local_rank", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "do not pass --local_rank=N to PROGRAM",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.no_local_rank = true;
       return Status::ok();
     }},
    {"--no_python", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "run PROGRAM as given, even a .py file (which otherwise runs under python3 -u)",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.no_python = true;
       return Status::ok();
     }},
    {"--module", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "PROGRAM is a Python module: each rank runs python3 -u -m PROGRAM",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.module = true;
       return Status::ok();
     }},
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
    {"--no_ssh_check", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "skip the pre-flight's ssh part (each host reachable, same zt build, port, slots, clock); "
     "the master port is still checked here",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.no_ssh_check = true;
       return Status::ok();
     }},
    {"--ssh_port", nullptr, FlagKind::kValue, FlagSupport::kYes, "PORT",
     "port of the nodes' sshd (default: ssh's own, from the ssh config)",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       ZT_ASSIGN_OR_RETURN(o.ssh_port, int_parse(f, v, 1, 65535));
       return Status::ok();
     }},
    {"--no_ssh", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "a scheduler runs zt launch on every node itself: with --node_rank N (and --master_addr), "
     "start only node N's ranks of the hostfile, no ssh",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.no_ssh = true;
       return Status::ok();
     }},
    {"--node_rank", nullptr, FlagKind::kValue, FlagSupport::kYes, "N",
     "this node's index in the hostfile, with --no_ssh",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       ZT_ASSIGN_OR_RETURN(o.node_rank, int_parse(f, v, 0, 1 << 20));
       return Status::ok();
     }},
    {"--force_multi", nullptr, FlagKind::kSwitch, FlagSupport::kYes, nullptr,
     "run through the multi-node runner (ssh) even for one host",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.force_multi = true;
       return Status::ok();
     }},
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
    // The node launcher's flags: the master launcher passes them through ssh (multi_node.h).
    {"--world_info", nullptr, FlagKind::kValue, FlagSupport::kHidden, "B64",
     "the job's hosts and slots: base64 of the JSON {host: [slots]}, as DeepSpeed passes it",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.world_info = std::string(v);
       return Status::ok();
     }},
    {"--zt_job_token", nullptr, FlagKind::kValue, FlagSupport::kHidden, "HEX",
     "the job's ZT_JOB_TOKEN",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.job_token = std::string(v);
       return Status::ok();
     }},
    {"--zt_slot_kind", nullptr, FlagKind::kValue, FlagSupport::kHidden, "gpu|cpu",
     "what the slots of --world_info are",
     [](LaunchOptions& o, std::string_view f, std::string_view v) {
       if (v != "gpu" && v != "cpu") {
         return invalid_argument("argument {}: invalid choice: '{}' (choose from 'gpu', 'cpu')",
                                 f, v);
       }
       o.slot_kind = std::string(v);
       return Status::ok();
     }},
    {"--zt_link_stdin", nullptr, FlagKind::kSwitch, FlagSupport::kHidden, nullptr,
     "stdin is the link to the master launcher",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.link_stdin = true;
       return Status::ok();
     }},
    {"--zt_prefix_output", nullptr, FlagKind::kSwitch, FlagSupport::kHidden, nullptr,
     "prefix each output line of a rank with [rank R]",
     [](LaunchOptions& o, std::string_view, std::string_view) {
       o.prefix_output = true;
       return Status::ok();
     }},
    {"--zt_preflight", nullptr, FlagKind::kValue, FlagSupport::kHidden, "ADDR,PORT,KIND,N",
     "answer the master launcher's pre-flight with one JSON line",
     [](LaunchOptions& o, std::string_view, std::string_view v) {
       o.preflight = std::string(v);
       return Status::ok();
     }},
};

const FlagDef* flag_find(std::string_view name) {
  for (const FlagDef& f : kFlags) {
    if (name == f.name || (f.alias != nullptr && name == f.alias)) return &f;
  }
  return nullptr;
}

Status flag_refusal(const FlagDef& f) {
  return invalid_argument("{} is not supported by zt launch ({})", f.name, f.help);
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
    if (flag->support == FlagSupport::kRefused) return flag_refusal(*flag);
    if (flag->apply != nullptr) ZT_RETURN_IF_ERROR(flag->apply(o, name, value));
  }
  if (o.no_ssh && o.node_rank < 0) {
    return invalid_argument(
        "--no_ssh: a multi-node job started on every node by a scheduler needs --node_rank=N, "
        "this node's index in the hostfile");
  }
  if (!o.no_ssh && o.node_rank >= 0 && o.world_info.empty()) {
    return invalid_argument(
        "--node_rank {} is for --no_ssh (a scheduler starts zt launch on every node); the ssh "
        "and pdsh runners number the nodes themselves",
        o.node_rank);
  }
  if (i >= args.size()) {
    if (!o.preflight.empty()) return o;
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
      "Runs PROGRAM once per rank, on this machine or on every host of the hostfile, as\n"
      "DeepSpeed's `deepspeed` launcher does. Flags come before PROGRAM; PROGRAM and everything\n"
      "after it are passed on untouched, with --local_rank=N inserted as the first argument\n"
      "unless --no_local_rank is given. A .py PROGRAM runs under `python3 -u` (--no_python:\n"
      "as given; --module: `python3 -u -m PROGRAM`); any other PROGRAM is executed directly.\n"
      "Ranks: the hostfile's slots, else --num_procs N CPU ranks, else every visible GPU.\n"
      "\n"
      "flags:\n";
  for (const FlagDef& f : kFlags) {
    if (f.support != FlagSupport::kYes) continue;
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
      "Refused: --elastic_training.\n"
      "\n"
      "Several hosts: zt launch checks every host first (ssh without a password, the same zt\n"
      "build at the same path, the master port, the slots, the clocks), then starts one node\n"
      "launcher per host over ssh; each rank's output comes back as \"[rank R] ...\" lines.\n"
      "\n"
      "Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE,\n"
      "MASTER_ADDR, MASTER_PORT, ZT_JOB_TOKEN and (GPU ranks) CUDA_VISIBLE_DEVICES = its node's\n"
      "GPU ids. When one rank fails, every other rank on every node is stopped (SIGTERM, then\n"
      "SIGKILL after ZT_LAUNCH_GRACE_S seconds, default 30) and zt launch exits with that\n"
      "rank's code, naming the rank and its host.\n";
  return out;
}

}  // namespace zt::launcher
