// `zt ckpt export-hf` (checkpoint/hf_export.h) against two oracles that do not go through the
// exporter: the fixture files transformers wrote (an unchanged export must give back the same
// tensor names, dtypes, shapes and bytes, single file, shards or bf16), and the training engine's
// own forward (a trained checkpoint, exported and read back by the loader, must give the
// engine's logits). Then the errors a user can cause: one line naming the path.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/test_util.h"
#include "unit/comm/comm_test_ranks.h"
#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/checkpoint/hf_export.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/runtime/engine.h"
#include "zt/zero/zero_state.h"

namespace zt::ckpt {
namespace {
using namespace zt::nn;  // the models these files hold
namespace fs = std::filesystem;

const std::string kFixtures = ZT_SOURCE_DIR "/tests/fixtures/hf/";

struct RawTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  std::string file;  // the file name it was found in
};

nlohmann::json json_read(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Every tensor of a model folder as its files hold it: the files the index names, else
// model.safetensors (read here with the safetensors reader alone, not the model loader).
std::map<std::string, RawTensor> folder_tensors(const fs::path& dir) {
  std::vector<std::string> files;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    const nlohmann::json index = json_read(dir / "model.safetensors.index.json");
    for (auto& [name, file] : index["weight_map"].items()) {
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    }
  } else {
    files.push_back("model.safetensors");
  }
  std::map<std::string, RawTensor> out;
  for (const std::string& f : files) {
    auto file = SafetensorsFile::open((dir / f).string());
    if (!file.is_ok()) {
      ADD_FAILURE() << file.status().message();
      continue;
    }
    for (const auto& [name, e] : file->tensors()) {
      RawTensor t{.dtype = e.dtype, .shape = e.shape, .bytes = {}, .file = f};
      t.bytes.resize(static_cast<size_t>(e.end - e.begin));
      EXPECT_TRUE(file->read(name, 0, e.numel, t.bytes.data()).is_ok()) << name;
      EXPECT_TRUE(out.emplace(name, std::move(t)).second) << name << " twice";
    }
  }
  return out;
}

// The folder holds exactly the source's tensors, byte for byte.
void expect_same_tensors(const fs::path& src, const fs::path& out) {
  const auto want = folder_tensors(src), got = folder_tensors(out);
  ASSERT_FALSE(want.empty());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "export lacks '" << name << "'";
      continue;
    }
    EXPECT_EQ(dtype_name(it->second.dtype), dtype_name(w.dtype)) << name;
    EXPECT_EQ(it->second.shape, w.shape) << name;
    EXPECT_TRUE(it->second.bytes == w.bytes) << name << ": other bytes";
  }
  for (const auto& [name, g] : got) EXPECT_EQ(want.count(name), 1u) << "extra tensor " << name;
}

std::string export_error(const std::string& src, const std::string& out,
                         const HfExportOptions& o = {}) {
  auto r = hf_export(src, out, o);
  EXPECT_FALSE(r.is_ok()) << src << " -> " << out;
  const std::string m = r.is_ok() ? "" : r.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  return m;
}

// ---- (a) model directories: an unchanged export is the source

class HfExportFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfExportFixture, UnchangedExportHasTheSourceTensorsByteForByte) {
  testing::TempDir tmp;
  const fs::path src = kFixtures + GetParam(), out = tmp.path() / "out";
  std::vector<std::string> progress;
  auto r = hf_export(src.string(), out.string(),
                     {.progress = [&](const std::string& p) { progress.push_back(p); }});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  expect_same_tensors(src, out);
  // One file at the default 5GB (the sharded source included), no index, no stale shards.
  EXPECT_EQ(r->files, 1);
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_EQ(std::count(progress.begin(), progress.end(), (out / "model.safetensors").string()), 1);
  auto file = SafetensorsFile::open((out / "model.safetensors").string());
  ASSERT_TRUE(file.is_ok());
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(json_read(out / "config.json"), json_read(src / "config.json"));
  for (const std::string& f : hf_companion_files()) {
    EXPECT_EQ(fs::exists(out / f), fs::exists(src / f)) << f;
    if (fs::exists(src / f)) {
      EXPECT_EQ(json_read(out / f), json_read(src / f)) << f;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, HfExportFixture,
                         ::testing::Values("gpt2", "llama", "llama_tied_mqa", "llama_bf16",
                                           "llama_sharded", "qwen2", "opt", "opt_postln",
                                           "bert_mlm", "bert_cls"),
                         [](const auto& info) { return std::string(info.param); });

TEST(HfExport, SmallShardsGiveAnIndexOfEveryTensorThatLoadsToTheSameValues) {
  testing::TempDir tmp;
  const fs::path src = kFixtures + "llama", out = tmp.path() / "out";
  auto r = hf_export(src.string(), out.string(), {.max_shard_bytes = 40000});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->files, 3);
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  const nlohmann::json index = json_read(out / "model.safetensors.index.json");
  const auto src_tensors = folder_tensors(src), got = folder_tensors(out);
  int64_t total = 0;
  for (const auto& [name, t] : src_tensors) {
    ASSERT_TRUE(index["weight_map"].contains(name)) << name;
    EXPECT_EQ(index["weight_map"][name], got.at(name).file) << name;  // where it really is
    EXPECT_EQ(index["weight_map"][name],
              fmt::format("model-{:05d}-of-{:05d}.safetensors",
                          std::stoi(got.at(name).file.substr(6, 5)), r->files));
    total += static_cast<int64_t>(t.bytes.size());
  }
  EXPECT_EQ(index["weight_map"].size(), src_tensors.size());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  expect_same_tensors(src, out);
  // The loader reads the shards back to the values it reads from the source.
  auto a = load_hf_model(src.string()), b = load_hf_model(out.string());
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << (b.is_ok() ? "" : b.status().message());
  EXPECT_EQ(b->weight_files.size(), static_cast<size_t>(r->files));
  auto& ua = a->model->units();
  auto& ub = b->model->units();
  for (size_t u = 0; u < ua.size(); ++u) {
    auto pa = ua[u]->params(), pb = ub[u]->params();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      std::vector<float> va(pa[i]->numel()), vb(pb[i]->numel());
      pa[i]->source->read(0, pa[i]->numel(), va.data());
      pb[i]->source->read(0, pb[i]->numel(), vb.data());
      EXPECT_TRUE(std::memcmp(va.data(), vb.data(), va.size() * 4) == 0) << pa[i]->name;
    }
  }
  // Exported again into the same folder as one file: the shards and the index go.
  ASSERT_TRUE(hf_export(src.string(), out.string(), {}).is_ok());
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out / fmt::format("model-00001-of-{:05d}.safetensors", r->files)));
  expect_same_tensors(src, out);
}

TEST(HfExport, DtypeOverrideRoundsEveryTensorAndNamesItInTheConfig) {
  testing::TempDir tmp;
  const fs::path src = kFixtures + "llama", out = tmp.path() / "out";
  auto r = hf_export(src.string(), out.string(), {.dtype = DType::bf16});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->dtypes, "bf16");
  const auto want = folder_tensors(src), got = folder_tensors(out);
  for (const auto& [name, w] : want) {
    const RawTensor& g = got.at(name);
    ASSERT_EQ(g.dtype, DType::bf16) << name;
    ASSERT_EQ(g.bytes.size() * 2, w.bytes.size()) << name;
    const auto* f = reinterpret_cast<const float*>(w.bytes.data());
    const auto* h = reinterpret_cast<const uint16_t*>(g.bytes.data());
    for (size_t i = 0; i < g.bytes.size() / 2; ++i) {
      // Round to nearest even from the f32 bits: the top 16 bits, +1 past the halfway point.
      uint32_t u;
      std::memcpy(&u, &f[i], 4);
      const uint32_t low = u & 0xffffu, up = u >> 16;
      const uint32_t want_bits = low > 0x8000u || (low == 0x8000u && (up & 1u)) ? up + 1 : up;
      ASSERT_EQ(h[i], want_bits) << name << "[" << i << "]";
    }
  }
  EXPECT_EQ(json_read(out / "config.json")["dtype"], "bfloat16");
}

// ---- (b) a trained checkpoint, exported, is the engine's model

DeepSpeedConfig engine_config(int world = 1, int stage = 0) {
  auto c =
      config_parse(fmt::format(R"({{"train_batch_size": {}, "zero_optimization": {{"stage": {}}},
      "optimizer": {{"type": "AdamW", "params": {{"lr": 0.02}}}}}})",
                               2 * world, stage),
                   "test", world);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return *c;
}

// Three optimizer steps on random tokens (each rank its own).
void train(Engine& e, int V, uint64_t seed) {
  for (uint64_t s = 0; s < 3; ++s) {
    auto loss = e.forward(testing::random_ints({2, 8}, V, seed + s),
                          testing::random_ints({2, 8}, V, seed + 100 + s));
    ASSERT_TRUE(loss.is_ok()) << loss.status().message();
    ASSERT_TRUE(e.backward(*loss).is_ok());
    ASSERT_TRUE(e.step().is_ok());
  }
}

// f32 logits (B, T, V) of `model` on `ids`, without the padding columns.
std::vector<double> logits_of(Model& model, Context ctx, const Tensor& ids, int64_t V,
                              UnitHooks* hooks) {
  ctx.targets = nullptr;
  Tensor logits = model.forward(ctx, ids, hooks);
  const int64_t N = logits.size(0) * logits.size(1), Vp = logits.size(2);
  const std::vector<double> all = logits.to_doubles();
  std::vector<double> out;
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t v = 0; v < V; ++v) out.push_back(all[static_cast<size_t>(i * Vp + v)]);
  }
  return out;
}

// The logits of the model directory `dir` as the loader reads it, on the CPU in f32.
std::vector<double> export_logits(const fs::path& dir, const Tensor& ids, int64_t V) {
  auto back = load_hf_model(dir.string());
  if (!back.is_ok()) {
    ADD_FAILURE() << back.status().message();
    return {};
  }
  std::vector<Tensor> values, grads;
  for (auto& unit : back->model->units()) {
    values.push_back(Tensor::empty({unit->flat_numel()}, DType::f32));
    grads.push_back(Tensor::zeros({unit->flat_numel()}, DType::f32));
    zero::init_unit_params(*unit, values.back().data<float>(), 1);
    unit->bind(values.back(), grads.back());
  }
  Context ctx;
  ctx.mode = Mode::kEval;
  return logits_of(*back->model, ctx, ids, V, nullptr);
}

void expect_same_logits(const std::vector<double>& got, const std::vector<double>& engine) {
  ASSERT_FALSE(engine.empty());
  double scale = 0;
  for (double v : engine) scale = std::max(scale, std::abs(v));
  testing::expect_close(got, engine, 1e-5 * scale, 1e-5, "logits");
}

class HfExportCheckpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(HfExportCheckpoint, TrainedCheckpointExportsToTheEnginesLogits) {
  testing::TempDir tmp;
  const fs::path src = kFixtures + GetParam(), ckpt = tmp.path() / "ckpt", out = tmp.path() / "out";
  auto loaded = load_hf_model(src.string());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  Transformer& model = *loaded->model;
  const int V = model.transformer_config().vocab_size;
  auto e = initialize(model, engine_config(), {.device = Device::cpu()});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  train(**e, V, 10);
  ASSERT_TRUE((*e)->save_checkpoint(ckpt.string()).is_ok());
  auto r = hf_export(ckpt.string(), out.string(), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->source, "checkpoint global_step3");
  EXPECT_EQ(r->dtypes, "f32");

  // The same names and shapes as transformers' files, in f32; training moved every tensor.
  const auto want = folder_tensors(src), got = folder_tensors(out);
  ASSERT_EQ(got.size(), want.size());
  int moved = 0;
  for (const auto& [name, w] : want) {
    ASSERT_EQ(got.count(name), 1u) << name;
    EXPECT_EQ(got.at(name).shape, w.shape) << name;
    EXPECT_EQ(got.at(name).dtype, DType::f32) << name;
    moved += got.at(name).bytes != w.bytes ? 1 : 0;
  }
  EXPECT_EQ(moved, static_cast<int>(want.size()));
  const nlohmann::json config = json_read(out / "config.json");
  EXPECT_EQ(config["model_type"], json_read(src / "config.json")["model_type"]);

  // The export, read by the loader, computes the trained engine's logits.
  const Tensor ids = testing::random_ints({2, 12}, V, 99);
  expect_same_logits(export_logits(out, ids, V),
                     logits_of(model, (*e)->eval_context(), ids, V, (*e)->hooks()));
}

INSTANTIATE_TEST_SUITE_P(Families, HfExportCheckpoint,
                         ::testing::Values("gpt2", "llama", "llama_tied_mqa", "qwen2", "opt",
                                           "opt_postln", "bert_mlm"),
                         [](const auto& info) { return std::string(info.param); });

// Two ranks at stage 3 each save their chunk of every unit; the export reads each tensor (a q, k
// or v slice of a fused projection included) across both shards.
TEST(HfExport, SixteenBitModelSaveIsAFolderTransformersReads) {
  // Engine::save_16bit_model of a Transformer writes the Hugging Face layout (DeepSpeed's
  // save_16bit_model of a transformers module): the loader reads it back to the trained
  // engine's logits (f32 training: the master itself), and it has the source's tensor names.
  testing::TempDir tmp;
  const fs::path src = kFixtures + "llama", out = tmp.path() / "m16";
  auto loaded = load_hf_model(src.string());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  Transformer& model = *loaded->model;
  const int V = model.transformer_config().vocab_size;
  auto e = initialize(model, engine_config(), {.device = Device::cpu()});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  train(**e, V, 11);
  auto saved = (*e)->save_16bit_model(out.string());
  ASSERT_TRUE(saved.is_ok()) << saved.status().message();
  EXPECT_TRUE(*saved);
  const auto want = folder_tensors(src), got = folder_tensors(out);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_EQ(got.count(name), 1u) << name;
    EXPECT_EQ(got.at(name).shape, w.shape) << name;
  }
  const Tensor ids = testing::random_ints({2, 12}, V, 98);
  expect_same_logits(export_logits(out, ids, V),
                     logits_of(model, (*e)->eval_context(), ids, V, (*e)->hooks()));
}

TEST(HfExport, CheckpointOfTwoRanksAtStage3ExportsToTheEnginesLogits) {
  testing::TempDir tmp;
  const fs::path ckpt = tmp.path() / "ckpt", out = tmp.path() / "out";
  const int port = testing::free_tcp_port(), V = 256;
  const Tensor ids = testing::random_ints({2, 12}, V, 99);
  std::vector<double> engine_logits;
  testing::run_ranks(2, [&](int rank) {
    auto comm = testing::create_communicator(
        testing::rank_env(rank, 2, port, std::chrono::milliseconds(30000), "hf-export"),
        Device::cpu());
    ASSERT_NE(comm, nullptr);
    auto loaded = load_hf_model(kFixtures + "llama");
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    auto e = initialize(*loaded->model, engine_config(2, 3),
                        {.device = Device::cpu(), .comm = comm.get()});
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    train(**e, V, 10 + 10 * static_cast<uint64_t>(rank));
    ASSERT_TRUE((*e)->save_checkpoint(ckpt.string()).is_ok());
    auto logits = logits_of(*loaded->model, (*e)->eval_context(), ids, V, (*e)->hooks());
    if (rank == 0) engine_logits = std::move(logits);
  });
  auto r = hf_export(ckpt.string(), out.string(), {});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  expect_same_logits(export_logits(out, ids, V), engine_logits);
}

// ---- (c) errors a user can cause

TEST(HfExport, UserErrorsAreOneLineNamingThePath) {
  testing::TempDir tmp;
  const std::string llama = kFixtures + "llama";
  const std::string file = tmp.file("a_file");
  std::ofstream(file) << "x";
  EXPECT_NE(export_error(llama, file).find(file), std::string::npos);  // OUT is a file
  const std::string under_file = file + "/sub";                        // OUT cannot be made
  EXPECT_NE(export_error(llama, under_file).find(under_file), std::string::npos);
  fs::create_directories(tmp.path() / "empty");
  for (const std::string& src : {tmp.file("empty"), tmp.file("missing"), file}) {
    const std::string e = export_error(src, tmp.file("out"));
    EXPECT_NE(e.find(src), std::string::npos) << e;
    EXPECT_NE(e.find("neither"), std::string::npos) << e;
  }
  EXPECT_NE(export_error(llama, llama).find("source"), std::string::npos);
  EXPECT_NE(export_error(llama, tmp.file("out"), {.tag = "global_step1"}).find("--tag"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.path() / "out"));
  // A config without weights has nothing to export.
  fs::create_directories(tmp.path() / "config_only");
  fs::copy_file(llama + "/config.json", tmp.path() / "config_only/config.json");
  EXPECT_NE(export_error(tmp.file("config_only"), tmp.file("out")).find("no weights"),
            std::string::npos);
  EXPECT_FALSE(hf_export_dtype_parse("int8", "--dtype").is_ok());
  EXPECT_EQ(*hf_export_dtype_parse("bfloat16", "--dtype"), DType::bf16);
}

TEST(HfExport, CheckpointWithoutAHuggingFaceConfigIsRefusedNamingTheModel) {
  testing::TempDir tmp;
  auto loaded = load_hf_model(kFixtures + "llama");
  ASSERT_TRUE(loaded.is_ok());
  auto e = initialize(*loaded->model, engine_config(), {.device = Device::cpu()});
  ASSERT_TRUE(e.is_ok());
  const std::string ckpt = tmp.file("ckpt");
  ASSERT_TRUE((*e)->save_checkpoint(ckpt, "t").is_ok());
  // The metadata of a model that has no config.json to tell (Model::config_json() null).
  const fs::path meta = fs::path(ckpt) / "t" / ckpt::kModelStatesFile;
  nlohmann::json m = json_read(meta);
  m["model"]["config"] = nullptr;
  m["model"]["name"] = "my_model";
  std::ofstream(meta) << m.dump();
  const std::string err = export_error(ckpt, tmp.file("out"));
  EXPECT_NE(err.find("my_model"), std::string::npos) << err;
  EXPECT_NE(err.find("to-fp32"), std::string::npos) << err;
  EXPECT_NE(export_error(ckpt, tmp.file("out"), {.tag = "nope"}).find("nope"), std::string::npos);
}

}  // namespace
}  // namespace zt::ckpt
