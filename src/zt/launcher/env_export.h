// The environment a multi-node job carries to every node, as DeepSpeed's runner.py builds it
// (reference §5): the launcher's variables whose names start with NCCL, PYTHON, MV2, UCX or MLFLOW
// (DeepSpeed's EXPORT_ENVS plus the CUDA accelerator's NCCL), ZeroTrain's own ZT_* settings, and
// the KEY=VALUE lines of `.deepspeed_env` (the name from DS_ENV_FILE) in the home directory and
// then the working directory, later lines winning. PYTHONPATH gets the working directory prepended
// (set to it when unset), as DeepSpeed does, so `import` finds the user's modules on every node.
// Like DeepSpeed, when AISC_JOB_NAME is set NCCL_IB_HCA and UCX_NET_DEVICES stay per node.
// DeepSpeed's Nebula/AzureML names are not exported (no Nebula checkpointing here).
//
// The env file is read a little more kindly than DeepSpeed reads it (DeepSpeed fails on a blank
// line): blank lines and lines starting with '#' are skipped; every other line must be KEY=VALUE
// with KEY a variable name; KEY and VALUE are stripped of surrounding whitespace as DeepSpeed
// strips them, and VALUE is taken literally: it may hold '=' and any character, quotes included
// (no shell parsing: 'A="x y"' sets A to "x y" with the quotes). Errors name FILE:LINE.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {

inline constexpr const char* kEnvFileNameVar = "DS_ENV_FILE";
inline constexpr const char* kDefaultEnvFileName = ".deepspeed_env";

struct ExportedVar {
  std::string key;
  std::string value;
  friend bool operator==(const ExportedVar&, const ExportedVar&) = default;
};

// Whether the launcher's variable `key` goes to the nodes by the prefix rule (before the
// per-process and AISC exclusions, which exported_env applies): NCCL*, PYTHON*, MV2*, UCX*,
// MLFLOW*, ZT_* except the ones the launcher sets for each job or rank (ZT_HEARTBEAT_FD,
// ZT_JOB_TOKEN).
bool env_name_exported(std::string_view key);

// The exported variables, each key once (a later source replaces an earlier value in place), in
// the order: `base_env` ("KEY=VALUE" strings, the launcher's environment) filtered by
// env_name_exported, PYTHONPATH with `cwd` prepended, then the env file in `home` (skipped when
// `home` is empty), then the one in `cwd`. An absolute DS_ENV_FILE is read once. A file that
// exists but cannot be read, or a bad line, is an error naming FILE:LINE. `files_read`, when not
// null, receives the paths of the env files that were read (for the launcher's log line).
Result<std::vector<ExportedVar>> exported_env(const std::vector<std::string>& base_env,
                                              const std::string& cwd, const std::string& home,
                                              std::vector<std::string>* files_read = nullptr);

// Parses the text of one env file; `path` names it in errors ("PATH:LINE: ...").
Result<std::vector<ExportedVar>> env_file_parse(std::string_view text, std::string_view path);

// Whether `key` is a valid environment variable name for a shell: [A-Za-z_][A-Za-z0-9_]*.
bool env_name_valid(std::string_view key);

}  // namespace zt::launcher
