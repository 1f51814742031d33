// Token files (src/zt/data/token_file.h): files in llm.c's and nanoGPT's formats are built byte
// by byte here, as numpy would write them, and read back; the writer's output is parsed here by
// hand; every malformed file gives a Status naming the file.
#include "zt/data/token_file.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

namespace zt {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed with its contents at scope exit.
using testing::TempDir;

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Little-endian encoders, written out so the test does not share code with the writer.
void put_le(std::vector<unsigned char>& b, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
uint64_t get_le(const std::vector<unsigned char>& b, size_t at, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

// An llm.c file as data_common.py write_datafile makes it: 256 int32 header, then tokens.
std::vector<unsigned char> llmc_bytes(int32_t magic, int32_t version, int32_t count,
                                      const std::vector<uint32_t>& tokens, int token_bytes) {
  std::vector<unsigned char> b;
  put_le(b, static_cast<uint32_t>(magic), 4);
  put_le(b, static_cast<uint32_t>(version), 4);
  put_le(b, static_cast<uint32_t>(count), 4);
  for (int i = 3; i < 256; ++i) put_le(b, 0, 4);
  for (uint32_t t : tokens) put_le(b, t, token_bytes);
  return b;
}

std::vector<uint32_t> all_tokens(const TokenFile& f) {
  std::vector<uint32_t> v(static_cast<size_t>(f.num_tokens()));
  f.read_tokens(0, v);
  return v;
}

TEST(TokenFile, ReadsLlmcGpt2File) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {50256, 0, 1, 65535, 314, 42};
  write_bytes(dir.file("gpt2.bin"), llmc_bytes(20240520, 1, 6, tokens, 2));
  Result<TokenFile> f = TokenFile::open(dir.file("gpt2.bin"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->format(), TokenFileFormat::kLlmc);
  EXPECT_EQ(f->token_bytes(), 2);
  EXPECT_EQ(f->num_tokens(), 6);
  EXPECT_EQ(all_tokens(*f), tokens);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f->token(i), tokens[i]) << i;
}

TEST(TokenFile, ReadsLlmcLlama3File) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {128000, 9906, 1917, 0, 128255, 70000, 3};
  write_bytes(dir.file("llama.bin"), llmc_bytes(20240801, 7, 7, tokens, 4));
  Result<TokenFile> f = TokenFile::open(dir.file("llama.bin"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->token_bytes(), 4);
  EXPECT_EQ(all_tokens(*f), tokens);
  std::vector<uint32_t> middle(3);
  f->read_tokens(2, middle);
  EXPECT_EQ(middle, (std::vector<uint32_t>{1917, 0, 128255}));
}

TEST(TokenFile, ReadsRawNanoGptFileInEachDtype) {
  TempDir dir;
  // nanoGPT: np.array(ids, dtype=np.uint16).tofile(path), no header.
  const std::vector<uint32_t> tokens = {15496, 11, 995, 0, 65535, 50256, 7};
  std::vector<unsigned char> u16;
  for (uint32_t t : tokens) put_le(u16, t, 2);
  write_bytes(dir.file("train.bin"), u16);
  Result<TokenFile> f = TokenFile::open(dir.file("train.bin"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->format(), TokenFileFormat::kRaw);
  EXPECT_EQ(f->num_tokens(), 7);
  EXPECT_EQ(all_tokens(*f), tokens);

  std::vector<unsigned char> u8 = {0, 255, 10, 65};
  write_bytes(dir.file("u8.bin"), u8);
  Result<TokenFile> f8 = TokenFile::open(dir.file("u8.bin"), {.raw_dtype = DType::u8});
  ASSERT_TRUE(f8.is_ok()) << f8.status().message();
  EXPECT_EQ(all_tokens(*f8), (std::vector<uint32_t>{0, 255, 10, 65}));

  std::vector<unsigned char> i32;
  for (uint32_t t : {100000u, 1u, 2u}) put_le(i32, t, 4);
  write_bytes(dir.file("i32.bin"), i32);
  Result<TokenFile> f32 = TokenFile::open(dir.file("i32.bin"), {.raw_dtype = DType::i32});
  ASSERT_TRUE(f32.is_ok()) << f32.status().message();
  EXPECT_EQ(all_tokens(*f32), (std::vector<uint32_t>{100000, 1, 2}));
}

TEST(TokenFile, ForcedRawReadsAnLlmcFileAsTokens) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), llmc_bytes(20240520, 1, 2, {5, 6}, 2));
  Result<TokenFile> f = TokenFile::open(dir.file("a.bin"), {.format = TokenFileFormat::kRaw});
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->num_tokens(), (1024 + 4) / 2);
  EXPECT_EQ(f->token(0), 20240520u & 0xffff);  // low half of the magic
  EXPECT_EQ(f->token(513), 6u);
}

// Every malformed input gives a non-ok Status whose message names the file and `fragment`.
void expect_error(const std::string& path, const TokenFileOptions& options,
                  const std::string& fragment) {
  Result<TokenFile> f = TokenFile::open(path, options);
  ASSERT_FALSE(f.is_ok()) << path;
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find(fragment), std::string::npos) << f.status().message();
}

TEST(TokenFile, MalformedFilesGiveStatusNamingTheFile) {
  TempDir dir;
  const std::string missing = dir.file("missing.bin");
  expect_error(missing, {}, "does not exist");
  EXPECT_EQ(TokenFile::open(missing).status().code(), StatusCode::kNotFound);

  // Header claims 100 tokens, 50 are present.
  std::vector<uint32_t> fifty(50, 7);
  write_bytes(dir.file("trunc.bin"), llmc_bytes(20240520, 1, 100, fifty, 2));
  expect_error(dir.file("trunc.bin"), {}, "truncated");
  expect_error(dir.file("trunc.bin"), {}, "100 tokens");
  expect_error(dir.file("trunc.bin"), {}, "open it as raw");  // auto-detected: say how to force

  write_bytes(dir.file("long.bin"), llmc_bytes(20240520, 1, 10, fifty, 2));
  expect_error(dir.file("long.bin"), {}, "trailing bytes");

  write_bytes(dir.file("version.bin"), llmc_bytes(20240520, 3, 2, {1, 2}, 2));
  expect_error(dir.file("version.bin"), {}, "version 3");

  write_bytes(dir.file("negative.bin"), llmc_bytes(20240520, 1, -5, {}, 2));
  expect_error(dir.file("negative.bin"), {}, "-5");

  std::vector<unsigned char> short_header = llmc_bytes(20240520, 1, 0, {}, 2);
  short_header.resize(100);
  write_bytes(dir.file("header.bin"), short_header);
  expect_error(dir.file("header.bin"), {}, "truncated");

  write_bytes(dir.file("odd.bin"), {1, 2, 3});
  expect_error(dir.file("odd.bin"), {}, "3 bytes");

  write_bytes(dir.file("empty.bin"), {});
  expect_error(dir.file("empty.bin"), {}, "empty");

  write_bytes(dir.file("raw.bin"), {1, 0, 2, 0});
  expect_error(dir.file("raw.bin"), {.format = TokenFileFormat::kLlmc}, "magic");

  expect_error(dir.file("raw.bin"), {.raw_dtype = DType::f32}, "f32");
  expect_error(dir.path().string(), {}, "not a regular file");
}

TEST(TokenFileWrite, WritesLlmcGpt2LayoutForSmallVocab) {
  TempDir dir;
  const std::vector<int32_t> tokens = {0, 256, 65535, 12, 13};
  ASSERT_TRUE(token_file_write(dir.file("out.bin"), tokens, 65536).is_ok());
  // Parse by hand: header ints, then uint16 tokens, nothing more.
  const std::vector<unsigned char> b = read_bytes(dir.file("out.bin"));
  ASSERT_EQ(b.size(), 1024u + 2 * tokens.size());
  EXPECT_EQ(get_le(b, 0, 4), 20240520u);
  EXPECT_EQ(get_le(b, 4, 4), 1u);
  EXPECT_EQ(get_le(b, 8, 4), tokens.size());
  for (size_t i = 3; i < 256; ++i) EXPECT_EQ(get_le(b, 4 * i, 4), 0u) << i;
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(get_le(b, 1024 + 2 * i, 2), static_cast<uint64_t>(tokens[i])) << i;
  }
  // And the reader agrees.
  Result<TokenFile> f = TokenFile::open(dir.file("out.bin"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(all_tokens(*f), (std::vector<uint32_t>{0, 256, 65535, 12, 13}));
}

TEST(TokenFileWrite, WritesLlmcLlama3LayoutForLargeVocab) {
  TempDir dir;
  const std::vector<int32_t> tokens = {128000, 65536, 1};
  ASSERT_TRUE(token_file_write(dir.file("nested/deeper/out.bin"), tokens, 128256).is_ok());
  const std::vector<unsigned char> b = read_bytes(dir.file("nested/deeper/out.bin"));
  ASSERT_EQ(b.size(), 1024u + 4 * tokens.size());
  EXPECT_EQ(get_le(b, 0, 4), 20240801u);
  EXPECT_EQ(get_le(b, 4, 4), 7u);
  EXPECT_EQ(get_le(b, 8, 4), 3u);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(get_le(b, 1024 + 4 * i, 4), static_cast<uint64_t>(tokens[i])) << i;
  }
}

TEST(TokenFileWrite, FailureLeavesExistingFileAndNoTemporary) {
  TempDir dir;
  const std::string out = dir.file("out.bin");
  ASSERT_TRUE(token_file_write(out, std::vector<int32_t>{1, 2, 3}, 257).is_ok());
  const std::vector<unsigned char> before = read_bytes(out);

  Status s = token_file_write(out, std::vector<int32_t>{1, 257, 3}, 257);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(out), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("token 257 at index 1"), std::string::npos) << s.message();
  EXPECT_EQ(read_bytes(out), before);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";

  EXPECT_FALSE(token_file_write(out, std::vector<int32_t>{-1}, 257).is_ok());
  EXPECT_FALSE(token_file_write(out, std::vector<int32_t>{0}, 0).is_ok());
  EXPECT_EQ(read_bytes(out), before);
}

TEST(TokenFileWrite, StreamingWriterMatchesOneShotWrite) {
  TempDir dir;
  std::vector<int32_t> tokens(200000);
  std::mt19937 rng(3);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 257);
  {
    Result<TokenFileWriter> w = TokenFileWriter::create(dir.file("stream.bin"), 257);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    // Uneven pieces, one larger than the writer's internal chunk.
    const size_t cuts[] = {0, 1, 70000, 70001, 200000};
    for (int i = 0; i + 1 < 5; ++i) {
      ASSERT_TRUE(w->append(std::span(tokens).subspan(cuts[i], cuts[i + 1] - cuts[i])).is_ok());
    }
    EXPECT_FALSE(fs::exists(dir.file("stream.bin"))) << "visible before finish()";
    ASSERT_TRUE(w->finish().is_ok());
  }
  Result<TokenFile> f = TokenFile::open(dir.file("stream.bin"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->num_tokens(), 200000);
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_EQ(f->token(static_cast<int64_t>(i)), static_cast<uint32_t>(tokens[i])) << i;
  }

  // An abandoned writer publishes nothing.
  {
    Result<TokenFileWriter> w = TokenFileWriter::create(dir.file("abandoned.bin"), 257);
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE(w->append(tokens).is_ok());
  }
  EXPECT_FALSE(fs::exists(dir.file("abandoned.bin")));
}

}  // namespace
}  // namespace zt
