// `zt ckpt`: checkpoints without training. to-fp32 (DeepSpeed's zero_to_fp32.py) writes the
// consolidated fp32 weights; export-hf writes a checkpoint or a model directory as a folder
// transformers loads; inspect lists what a checkpoint folder holds and, with --verify, checks
// every file against its recorded size and checksum.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli_args.h"
#include "commands.h"
#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/consolidate.h"
#include "zt/checkpoint/hf_export.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt ckpt to-fp32 CKPT_DIR OUT_DIR [--tag TAG] [--max-shard-size 5GB]
       zt ckpt export-hf SRC OUT_DIR [--tag TAG] [--dtype f32|bf16|f16] [--max-shard-size 5GB]
                         [--adapter-only]
       zt ckpt inspect CKPT_DIR [--tag TAG] [--verify]

to-fp32   the full fp32 weights of a checkpoint saved at any world size and ZeRO stage, as
          safetensors (sharded with model.safetensors.index.json past --max-shard-size) plus the
          model's config.json (DeepSpeed's zero_to_fp32.py).
export-hf a checkpoint (SRC with `latest` or a global_step folder) or a model directory (SRC
          with config.json) as a folder transformers' from_pretrained loads: its config.json,
          the weights by transformers' names (q/k/v and gate/up split, vocabulary padding
          dropped) in model.safetensors or shards of --max-shard-size (default 5GB = 5e9 bytes,
          as transformers) with model.safetensors.index.json, and the tokenizer files beside a
          model directory. --dtype: default the source files' dtype (a model directory) or f32
          (a checkpoint). A checkpoint of a LoRA run exports with its adapters merged into the
          base weights (W + alpha/r B A); --adapter-only writes the adapters alone as a PEFT
          adapter (adapter_config.json + adapter_model.safetensors) for peft to load onto the
          base model.
inspect   the tags in CKPT_DIR and, for one (default: latest), its step, world size, stage,
          precision, model and files; --verify checks every file's size and checksum and names
          the first that is missing or damaged (exit 1).

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--tag", FlagKind::kValue, "the checkpoint tag (default: the one `latest` names)", "TAG"},
    {"--max-shard-size", FlagKind::kValue,
     "to-fp32, export-hf: largest weights file (default 5GB: 5GiB for to-fp32 as DeepSpeed, "
     "5e9 bytes for export-hf as transformers)",
     "SIZE"},
    {"--dtype", FlagKind::kValue, "export-hf: f32, bf16 or f16 (default: as the source)",
     "DTYPE"},
    {"--adapter-only", FlagKind::kSwitch,
     "export-hf of a LoRA checkpoint: only the adapters, as a PEFT adapter folder"},
    {"--verify", FlagKind::kSwitch, "inspect: check every file's size and checksum"},
    {"--help", FlagKind::kSwitch, "this help"},
};

int to_fp32(const ParsedArgs& a) {
  if (a.positional.size() != 3) {
    return fail(invalid_argument("zt ckpt to-fp32 needs CKPT_DIR and OUT_DIR"));
  }
  ckpt::ConsolidateOptions o;
  o.tag = a.get("--tag").value_or("");
  if (auto m = a.get("--max-shard-size")) {
    auto b = ckpt::byte_size_parse(*m, "--max-shard-size");
    if (!b) return fail(b.status());
    o.max_shard_bytes = *b;
  }
  o.progress = [](const std::string& path) { std::fprintf(stderr, "wrote %s\n", path.c_str()); };
  auto s = ckpt::consolidate_fp32(a.positional[1], a.positional[2], o);
  if (!s) return fail(s.status());
  std::printf("%s: %lld parameters, %.1f MiB of fp32 in %d file(s) in %s\n", s->tag.c_str(),
              static_cast<long long>(s->parameters), s->bytes / 1048576.0, s->files,
              a.positional[2].c_str());
  return 0;
}

int export_hf(const ParsedArgs& a) {
  if (a.positional.size() != 3) {
    return fail(invalid_argument("zt ckpt export-hf needs SRC (a checkpoint folder or a model "
                                 "directory) and OUT_DIR"));
  }
  ckpt::HfExportOptions o;
  o.tag = a.get("--tag").value_or("");
  if (auto m = a.get("--max-shard-size")) {
    auto b = ckpt::byte_size_parse(*m, "--max-shard-size");
    if (!b) return fail(b.status());
    o.max_shard_bytes = *b;
  }
  if (auto d = a.get("--dtype")) {
    auto dt = ckpt::hf_export_dtype_parse(*d, "--dtype");
    if (!dt) return fail(dt.status());
    o.dtype = *dt;
  }
  o.adapter_only = a.has("--adapter-only");
  o.progress = [](const std::string& path) { std::fprintf(stderr, "wrote %s\n", path.c_str()); };
  auto s = ckpt::hf_export(a.positional[1], a.positional[2], o);
  if (!s) return fail(s.status());
  std::printf("%s: %d tensors, %lld parameters, %.1f MiB of %s in %d file(s) in %s\n",
              s->source.c_str(), s->tensors, static_cast<long long>(s->parameters),
              s->bytes / 1048576.0, s->dtypes.c_str(), s->files, a.positional[2].c_str());
  return 0;
}

int inspect(const ParsedArgs& a) {
  if (a.positional.size() != 2) return fail(invalid_argument("zt ckpt inspect needs CKPT_DIR"));
  const std::string& dir = a.positional[1];
  auto tags = ckpt::tags_list(dir);
  if (!tags) return fail(tags.status());
  auto latest = ckpt::latest_read(dir);
  if (!latest) return fail(latest.status());
  std::printf("%s: %zu complete checkpoint(s); latest: %s\n", dir.c_str(), tags->size(),
              *latest ? (*latest)->c_str() : "(none)");
  for (const auto& t : *tags) {
    std::printf("  %-24s step %lld\n", t.tag.c_str(), static_cast<long long>(t.global_steps));
  }
  auto tag = ckpt::tag_resolve(dir, a.get("--tag").value_or(""));
  if (!tag) return fail(tag.status());
  const std::string path = ckpt::tag_path(dir, *tag);
  auto meta = ckpt::metadata_read(path);
  if (!meta) return fail(meta.status());
  const nlohmann::json& m = *meta;
  // mp_world_size counts the model-parallel ranks: stages x tensor-parallel ranks.
  const int tensor = std::max(1, m.value("tensor_parallel_size", 1));
  const int stages = m.value("mp_world_size", 1) / tensor;
  std::string pipeline =
      stages > 1 ? fmt::format(" x {} pipeline stages", stages) : std::string();
  if (tensor > 1) pipeline += fmt::format(" x {} tensor-parallel ranks", tensor);
  std::printf("%s:\n  step %lld, samples %lld, skipped %lld\n  saved on %d rank(s)%s at ZeRO "
              "stage %d in %s; optimizer %s\n  model %s, %zu units\n",
              path.c_str(), static_cast<long long>(m.value("global_steps", int64_t{0})),
              static_cast<long long>(m.value("global_samples", int64_t{0})),
              static_cast<long long>(m.value("skipped_steps", int64_t{0})),
              m.value("dp_world_size", 0), pipeline.c_str(), m.value("zero_stage", 0),
              m.value("dtype", std::string("?")).c_str(),
              m.contains("optimizer") ? m["optimizer"].value("type", "?").c_str() : "?",
              m.contains("model") ? m["model"].value("name", "?").c_str() : "?",
              m.contains("model") && m["model"].contains("units") ? m["model"]["units"].size()
                                                                  : size_t{0});
  if (m.contains("model") && m["model"].contains("lora") && m["model"]["lora"].is_object()) {
    const nlohmann::json& l = m["model"]["lora"];
    std::printf("  LoRA rank %d, alpha %g, %zu adapters on %s%s\n", l.value("r", 0),
                l.value("alpha", 0.0), l.contains("adapters") ? l["adapters"].size() : size_t{0},
                l.contains("modules") ? l["modules"].dump().c_str() : "?",
                l.value("only_optimize", false) ? "; only the adapters trained" : "");
  }
  int64_t total = 0;
  if (m.contains("files") && m["files"].is_object()) {
    for (const auto& [name, info] : m["files"].items()) {
      const int64_t b = info.value("bytes", int64_t{0});
      total += b;
      std::printf("  %-58s %10.1f MiB  xxh3 %s\n", name.c_str(), b / 1048576.0,
                  info.value("xxh3", std::string("?")).c_str());
    }
  }
  std::printf("  total %.1f MiB\n", total / 1048576.0);
  if (a.has("--verify")) {
    if (Status s = ckpt::checkpoint_verify(path, m); !s.is_ok()) return fail(s);
    std::printf("verified: every file has its size and checksum\n");
  }
  return 0;
}

}  // namespace

int cmd_ckpt(const Args& args) {
  auto parsed = parse_args("zt ckpt", kFlags, args);
  if (!parsed) return fail(parsed.status());
  const ParsedArgs& a = *parsed;
  if (a.has("--help") || a.positional.empty()) {
    std::printf("%s%s", kUsage, usage_flags(kFlags).c_str());
    return a.has("--help") ? 0 : 2;
  }
  if (a.positional[0] == "to-fp32") return to_fp32(a);
  if (a.positional[0] == "export-hf") return export_hf(a);
  if (a.positional[0] == "inspect") return inspect(a);
  return fail(invalid_argument("zt ckpt: unknown action '{}' (to-fp32, export-hf or inspect)",
                               a.positional[0]));
}

}  // namespace zt::cli
