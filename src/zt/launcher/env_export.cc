// The exported environment of a multi-node job (env_export.h).
#include "zt/launcher/env_export.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "zt/launcher/shell_quote.h"

namespace zt::launcher {
namespace {

// DeepSpeed's EXPORT_ENVS ('MLFLOW', 'PYTHON', 'MV2', 'UCX') and the CUDA accelerator's
// export_envs() ('NCCL'), matched as prefixes (str.startswith), plus ZeroTrain's settings.
constexpr std::string_view kExportPrefixes[] = {"NCCL", "PYTHON", "MV2", "UCX", "MLFLOW", "ZT_"};

// Set by the launcher for each job or rank: an inherited value (zt launch run from inside a rank
// of another job) must not reach the new job's ranks.
constexpr std::string_view kPerProcessVars[] = {"ZT_HEARTBEAT_FD", "ZT_JOB_TOKEN"};

// DeepSpeed's EXCLUDE_ENVS: on AISC each node sets these itself.
constexpr std::string_view kAiscJobVar = "AISC_JOB_NAME";
constexpr std::string_view kAiscPerNodeVars[] = {"NCCL_IB_HCA", "UCX_NET_DEVICES"};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}


void put(std::vector<ExportedVar>& vars, std::string_view key, std::string_view value) {
  for (ExportedVar& v : vars) {
    if (v.key == key) {
      v.value = std::string(value);
      return;
    }
  }
  vars.push_back({std::string(key), std::string(value)});
}

std::string path_join(const std::string& dir, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// Reads `path` into `text`; false (and no error) when there is no such file, as DeepSpeed skips
// a missing one (os.path.isfile).
Result<bool> file_read_if_present(const std::string& path, std::string& text) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return io_error("cannot read the environment file {}: {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return false;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return io_error("cannot read the environment file {}: {}; fix its permissions or remove it",
                    path, std::strerror(errno));
  }
  std::stringstream s;
  s << in.rdbuf();
  text = s.str();
  return true;
}

}  // namespace

bool env_name_valid(std::string_view key) {
  if (key.empty()) return false;
  auto start = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!start(key[0])) return false;
  for (char c : key) {
    if (!start(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool env_name_exported(std::string_view key) {
  for (std::string_view p : kPerProcessVars) {
    if (key == p) return false;
  }
  for (std::string_view p : kExportPrefixes) {
    if (key.starts_with(p)) return true;
  }
  return false;
}

Result<std::vector<ExportedVar>> env_file_parse(std::string_view text, std::string_view path) {
  std::vector<ExportedVar> vars;
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    std::string_view body = strip(line);
    if (body.empty() || body[0] == '#') continue;
    if (line.find('\0') != std::string_view::npos) {
      return invalid_argument("{}:{}: the line holds a NUL byte, which no variable can hold", path,
                              line_no);
    }
    size_t eq = body.find('=');
    if (eq == std::string_view::npos) {
      return invalid_argument("{}:{}: expected KEY=VALUE, got '{}'", path, line_no,
                              printable(body));
    }
    std::string_view key = strip(body.substr(0, eq));
    std::string_view value = strip(body.substr(eq + 1));
    if (!env_name_valid(key)) {
      std::string hint = key.starts_with("export ")
                             ? " (write KEY=VALUE without 'export')"
                             : " (letters, digits and '_', not starting with a digit)";
      return invalid_argument("{}:{}: '{}' is not a variable name{}", path, line_no, printable(key),
                              hint);
    }
    put(vars, key, value);
  }
  return vars;
}

Result<std::vector<ExportedVar>> exported_env(const std::vector<std::string>& base_env,
                                              const std::string& cwd, const std::string& home,
                                              std::vector<std::string>* files_read) {
  bool aisc = false;
  std::string file_name = kDefaultEnvFileName;
  for (const std::string& kv : base_env) {
    std::string_view entry(kv);
    size_t eq = entry.find('=');
    std::string_view key = entry.substr(0, eq);
    if (key == kAiscJobVar) aisc = true;
    // DeepSpeed reads DS_ENV_FILE with os.getenv: an empty value names a file called ''.
    if (key == kEnvFileNameVar && eq != std::string_view::npos) {
      file_name = std::string(entry.substr(eq + 1));
    }
  }

  std::vector<ExportedVar> vars;
  bool have_pythonpath = false;
  for (const std::string& kv : base_env) {
    std::string_view entry(kv);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key = entry.substr(0, eq);
    std::string_view value = entry.substr(eq + 1);
    if (!env_name_exported(key)) continue;
    bool per_node = false;
    for (std::string_view v : kAiscPerNodeVars) per_node = per_node || (aisc && key == v);
    if (per_node) continue;
    if (key == "PYTHONPATH") {
      have_pythonpath = true;
      put(vars, key, cwd + ":" + std::string(value));
    } else {
      put(vars, key, value);
    }
  }
  if (!have_pythonpath) put(vars, "PYTHONPATH", cwd);

  if (file_name.empty()) return vars;
  std::vector<std::string> paths;
  if (!home.empty()) paths.push_back(path_join(home, file_name));
  std::string in_cwd = path_join(cwd, file_name);
  if (paths.empty() || paths.front() != in_cwd) paths.push_back(in_cwd);
  for (const std::string& path : paths) {
    std::string text;
    ZT_ASSIGN_OR_RETURN(bool present, file_read_if_present(path, text));
    if (!present) continue;
    if (files_read != nullptr) files_read->push_back(path);
    ZT_ASSIGN_OR_RETURN(std::vector<ExportedVar> from_file, env_file_parse(text, path));
    for (const ExportedVar& v : from_file) put(vars, v.key, v.value);
  }
  return vars;
}

}  // namespace zt::launcher
