// `zt data prepare` (src/zt/data/prepare.h): a temp folder of text files, symlinks and
// sub-folders is prepared and the token file compared with the concatenation built here by hand
// from the documented rules (sorted files, EOT between files, symlinks to included files
// skipped).
#include "zt/data/prepare.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "zt/data/tokenizer/byte_tokenizer.h"
#include "zt/data/token_file.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::vector<int32_t> read_token_file(const std::string& path) {
  Result<TokenFile> f = TokenFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  if (!f.is_ok()) return {};
  std::vector<int32_t> out;
  for (int64_t i = 0; i < f->num_tokens(); ++i) out.push_back(static_cast<int32_t>(f->token(i)));
  return out;
}

// Bytes of each text as tokens, EOT between them.
std::vector<int32_t> expected_tokens(const std::vector<std::string>& texts) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out.push_back(ByteTokenizer::kEot);
    for (unsigned char c : texts[i]) out.push_back(c);
  }
  return out;
}

// corpus/{a.txt, b.txt, sub/c.txt, sub/empty.txt} plus links: to a file inside (skipped), to a
// file outside (read), to a folder (not entered), dangling (ignored).
struct Corpus {
  TempDir dir;
  std::string root = dir.file("corpus");
  Corpus() {
    write_text(root + "/b.txt", "bee");
    write_text(root + "/a.txt", "ay");
    write_text(root + "/sub/c.txt", "sea\xFF");
    write_text(root + "/sub/empty.txt", "");
    write_text(dir.file("outside.txt"), "out");
    fs::create_symlink("a.txt", root + "/link_a");
    fs::create_symlink("../outside.txt", root + "/link_out");
    fs::create_directory_symlink("sub", root + "/link_dir");
    fs::create_symlink("nowhere", root + "/dangling");
  }
};

TEST(DataPrepare, FolderIsSortedRecursiveWithLinksToIncludedFilesSkipped) {
  Corpus c;
  const std::string out = c.dir.file("out/train.bin");
  std::vector<int64_t> progress_bytes;
  Result<PrepareSummary> s =
      data_prepare({c.root}, out, {.on_file = [&](const PrepareProgress& p) {
                     EXPECT_EQ(p.file_index, static_cast<int64_t>(progress_bytes.size()));
                     EXPECT_EQ(p.num_files, 5);
                     progress_bytes.push_back(p.bytes);
                   }});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::vector<std::string> want_files = {c.root + "/a.txt", c.root + "/b.txt",
                                               c.root + "/link_out", c.root + "/sub/c.txt",
                                               c.root + "/sub/empty.txt"};
  EXPECT_EQ(s->files, want_files);
  EXPECT_EQ(progress_bytes, (std::vector<int64_t>{2, 3, 3, 4, 0}));
  EXPECT_EQ(s->bytes, 12);
  EXPECT_EQ(s->tokens, 16);
  EXPECT_EQ(read_token_file(out), expected_tokens({"ay", "bee", "out", "sea\xFF", ""}));
}

TEST(DataPrepare, ExplicitFileFirstThenFolderWithoutDuplicates) {
  Corpus c;
  const std::string out = c.dir.file("x.bin");
  Result<PrepareSummary> s = data_prepare({c.dir.file("outside.txt"), c.root + "/sub"}, out);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(read_token_file(out), expected_tokens({"out", "sea\xFF", ""}));

  // outside.txt is included first; the folder's link to it is then a duplicate.
  s = data_prepare({c.dir.file("outside.txt"), c.root}, out);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(read_token_file(out), expected_tokens({"out", "ay", "bee", "sea\xFF", ""}));
}

TEST(DataPrepare, OutputInsideInputFolderIsNotReadBack) {
  Corpus c;
  const std::string out = c.root + "/tokens.bin";
  ASSERT_TRUE(data_prepare({c.root}, out).is_ok());
  const std::vector<int32_t> first = read_token_file(out);
  Result<PrepareSummary> again = data_prepare({c.root}, out);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(again->files.size(), 5u);
  EXPECT_EQ(read_token_file(out), first);
  EXPECT_EQ(first, expected_tokens({"ay", "bee", "out", "sea\xFF", ""}));
}

TEST(DataPrepare, ErrorsNameTheInputAndLeaveNoOutput) {
  Corpus c;
  const std::string out = c.dir.file("never.bin");
  Result<PrepareSummary> s = data_prepare({c.root, c.dir.file("missing.txt")}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find(c.dir.file("missing.txt")), std::string::npos);

  s = data_prepare({c.root + "/sub/empty.txt"}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("empty"), std::string::npos) << s.status().message();

  s = data_prepare({c.root + "/a.txt"}, c.root + "/a.txt");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("also the output"), std::string::npos);

  fs::create_directories(c.dir.file("hollow/inner"));
  s = data_prepare({c.dir.file("hollow")}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find(c.dir.file("hollow")), std::string::npos);

  EXPECT_FALSE(data_prepare({}, out).is_ok());
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(c.dir.path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(DefaultCorpus, RegularFilesOnlySortedAndMissingFolderNamed) {
  Corpus c;
  Result<std::vector<std::string>> files = default_corpus_paths(c.root);
  ASSERT_TRUE(files.is_ok()) << files.status().message();
  EXPECT_EQ(*files, (std::vector<std::string>{c.root + "/a.txt", c.root + "/b.txt"}));

  Result<std::vector<std::string>> missing = default_corpus_paths(c.dir.file("gone"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(c.dir.file("gone")), std::string::npos);
}

TEST(DefaultCorpus, DebianCommonLicensesWhenPresent) {
  const std::string folder(kDefaultCorpusDir);
  if (!fs::is_directory(folder)) GTEST_SKIP() << folder << " is not on this machine";
  Result<std::vector<std::string>> files = default_corpus_paths();
  ASSERT_TRUE(files.is_ok()) << files.status().message();
  EXPECT_TRUE(std::is_sorted(files->begin(), files->end()));
  for (const std::string& f : *files) {
    EXPECT_FALSE(fs::is_symlink(f)) << f;
    EXPECT_TRUE(fs::is_regular_file(f)) << f;
  }
  // Debian ships GPL as a symlink to GPL-3: the text is read once.
  if (fs::is_symlink(folder + "/GPL")) {
    EXPECT_EQ(std::count(files->begin(), files->end(), folder + "/GPL"), 0);
    EXPECT_EQ(std::count(files->begin(), files->end(), folder + "/GPL-3"), 1);
  }
  // Prepared, it holds every byte plus one EOT between files, and starts with the first file.
  TempDir dir;
  Result<PrepareSummary> s = data_prepare(*files, dir.file("licenses.bin"));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  int64_t bytes = 0;
  for (const std::string& f : *files) bytes += static_cast<int64_t>(fs::file_size(f));
  const auto num_files = static_cast<int64_t>(files->size());
  EXPECT_EQ(s->bytes, bytes);
  EXPECT_EQ(s->tokens, bytes + num_files - 1);
  Result<TokenFile> tf = TokenFile::open(dir.file("licenses.bin"));
  ASSERT_TRUE(tf.is_ok()) << tf.status().message();
  EXPECT_EQ(tf->num_tokens(), bytes + num_files - 1);
  std::ifstream first(files->front(), std::ios::binary);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(tf->token(i), static_cast<uint32_t>(static_cast<unsigned char>(first.get()))) << i;
  }
}

}  // namespace
}  // namespace zt
