// PROGRAM's command line (program.h).
#include "zt/launcher/program.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "zt/launcher/process_group.h"

namespace zt::launcher {
namespace {

constexpr const char* kPython = "python3";

Result<std::string> python_resolve(std::string_view program, std::string_view path_env,
                                   std::string_view why) {
  Result<std::string> python = executable_resolve(kPython, path_env);
  if (!python) {
    return not_found(
        "{} {} runs under python3, which is not on PATH; install it (Debian package python3) or "
        "activate the virtualenv that has it{}",
        why, program,
        why == "PROGRAM" ? "; to run the script itself, make it executable and pass --no_python"
                         : "");
  }
  return python;
}

}  // namespace

Result<ProgramMode> program_mode(bool module, bool no_python) {
  if (module && no_python) {
    // DeepSpeed's launch.py: "Don't use both the '--no_python' flag and the '--module' flag at
    // the same time."
    return invalid_argument(
        "--module and --no_python cannot be used together: --module runs `python3 -u -m "
        "PROGRAM`, --no_python runs PROGRAM without python; drop one");
  }
  if (module) return ProgramMode::kModule;
  if (no_python) return ProgramMode::kNoPython;
  return ProgramMode::kDefault;
}

Result<ProgramCommand> program_command(std::string_view program, ProgramMode mode,
                                       std::string_view path_env, const std::string& cwd) {
  if (program.empty()) return invalid_argument("PROGRAM is empty; pass the program to run");
  ProgramCommand command;
  if (mode == ProgramMode::kModule) {
    if (program[0] == '-' || program.find('/') != std::string_view::npos) {
      return invalid_argument(
          "--module {}: not a Python module name (write it as python3 -m takes it: "
          "package.module)",
          program);
    }
    ZT_ASSIGN_OR_RETURN(command.exec_path, python_resolve(program, path_env, "--module"));
    command.argv = {kPython, "-u", "-m", std::string(program)};
    command.python = true;
    return command;
  }
  if (mode == ProgramMode::kDefault && program.ends_with(".py")) {
    // python3 opens the script relative to the working directory, never from PATH.
    std::string path(program);
    if (path[0] == '-') {
      // python3 would read "-x.py" as its own option.
      return invalid_argument("PROGRAM {} starts with '-'; write ./{}", path, path);
    }
    std::string full = path[0] == '/' ? path : (cwd.empty() ? path : cwd + "/" + path);
    struct stat st {};
    if (stat(full.c_str(), &st) != 0) {
      return not_found("PROGRAM {} does not exist{}", path,
                       path[0] == '/' ? std::string() : fmt::format(" in {}", cwd));
    }
    if (S_ISDIR(st.st_mode)) return invalid_argument("PROGRAM {} is a directory", path);
    ZT_ASSIGN_OR_RETURN(command.exec_path, python_resolve(program, path_env, "PROGRAM"));
    command.argv = {kPython, "-u", path};
    command.python = true;
    return command;
  }
  Result<std::string> exec = executable_resolve(program, path_env);
  if (!exec) {
    if (mode == ProgramMode::kNoPython && program.ends_with(".py")) {
      return exec.status().with_context("--no_python runs the .py file itself: ");
    }
    return exec.status();
  }
  command.exec_path = std::move(exec).value();
  command.argv = {std::string(program)};
  return command;
}

std::vector<std::string> program_rank_argv(const ProgramCommand& command, int local_rank,
                                           const std::vector<std::string>& program_args) {
  std::vector<std::string> argv = command.argv;
  if (local_rank >= 0) argv.push_back(fmt::format("--local_rank={}", local_rank));
  argv.insert(argv.end(), program_args.begin(), program_args.end());
  return argv;
}

}  // namespace zt::launcher
