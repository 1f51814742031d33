// The autotuner's results as text and JSON (autotune.h): summary.txt's table, summary.json's
// records, and the clean-up of an earlier session's files.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "zt/tools/autotune.h"

namespace zt::tools {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string metric_text(TuneMetric m, double v) {
  if (m == TuneMetric::kFlops) return fmt::format("{:.3g}", v);
  return fmt::format("{:.2f}", v);
}

Json trial_record_json(const TrialRecord& t, int world) {
  const Candidate& c = t.candidate;
  Json knobs = Json::object();
  if (c.knobs.reduce_bucket_size) knobs["reduce_bucket_size"] = *c.knobs.reduce_bucket_size;
  if (c.knobs.prefetch_bucket_size) {
    knobs["stage3_prefetch_bucket_size"] = *c.knobs.prefetch_bucket_size;
  }
  if (c.knobs.overlap_comm) knobs["overlap_comm"] = *c.knobs.overlap_comm;
  if (c.knobs.offload_optimizer) knobs["offload_optimizer"] = *c.knobs.offload_optimizer;
  Json j = {{"name", c.name()},
            {"phase", t.phase},
            {"stage", c.stage},
            {"micro_batch", c.micro_batch},
            {"gradient_accumulation_steps", c.gas},
            {"train_batch_size", c.train_batch_size(world)},
            {"knobs", knobs},
            {"status", trial_status_name(t.result.status)},
            {"message", t.result.message},
            {"exp_dir", t.result.exp_dir}};
  if (t.result.ok()) {
    j["metric"] = t.result.metric;
    j["throughput"] = t.result.throughput;
    j["latency_ms"] = t.result.latency_ms;
    j["FLOPS_per_gpu"] = t.result.flops_per_gpu;
  }
  return j;
}

std::string summary_text(const std::vector<TrialRecord>& trials, std::optional<size_t> best,
                         const AutotuningConfig& cfg, int world, const std::string& header,
                         const std::vector<std::string>& notes, const std::string& footer) {
  const std::string mcol =
      fmt::format("{} ({})", tune_metric_name(cfg.metric), tune_metric_unit(cfg.metric));
  std::vector<std::vector<std::string>> rows = {
      {"#", "exp", "stage", "micro_batch", "gas", "train_batch", "knobs", mcol, "status", "note"}};
  for (size_t i = 0; i < trials.size(); ++i) {
    const TrialRecord& t = trials[i];
    const Candidate& c = t.candidate;
    std::string note = t.result.message;
    if (best && *best == i) note = note.empty() ? "best" : "best; " + note;
    rows.push_back({std::to_string(i + 1), c.name(), std::to_string(c.stage),
                    std::to_string(c.micro_batch), std::to_string(c.gas),
                    std::to_string(c.train_batch_size(world)), c.knobs_text(),
                    t.result.ok() ? metric_text(cfg.metric, t.result.metric) : "-",
                    trial_status_name(t.result.status), note});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t k = 0; k < r.size(); ++k) width[k] = std::max(width[k], r[k].size());
  }
  std::string out = header + "\n\n";
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = "|";
    for (size_t k = 0; k < r.size(); ++k) {
      s += " " + r[k] + std::string(width[k] - r[k].size(), ' ') + " |";
    }
    return s + "\n";
  };
  out += line(rows[0]);
  std::string sep = "|";
  for (size_t w : width) sep += std::string(w + 2, '-') + "|";
  out += sep + "\n";
  for (size_t i = 1; i < rows.size(); ++i) out += line(rows[i]);
  if (!notes.empty()) {
    out += "\nNot measured:\n";
    for (const auto& n : notes) out += "  " + n + "\n";
  }
  return out + "\n" + footer + "\n";
}

// Removes what an earlier session wrote (only that: the folders may hold other files).
void previous_results_remove(const AutotuningConfig& cfg) {
  std::error_code ec;
  for (const char* f :
       {"summary.txt", "summary.json", "ds_config_optimal.json", "cmd_optimal.txt"}) {
    fs::remove(fs::path(cfg.results_dir) / f, ec);
  }
  if (!fs::is_directory(cfg.exps_dir, ec)) return;
  for (const auto& e : fs::directory_iterator(cfg.exps_dir, ec)) {
    if (e.is_directory(ec) && fs::exists(e.path() / "ds_config.json", ec) &&
        fs::exists(e.path() / "cmd.txt", ec)) {
      fs::remove_all(e.path(), ec);
    }
  }
}

}  // namespace zt::tools
