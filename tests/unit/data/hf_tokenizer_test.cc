// tokenizer.json against the `tokenizers` library: every fixture in tests/fixtures/tokenizers
// (made by make_fixtures.py there, one tokenizer per family's pipeline, trained with
// `tokenizers` and encoded/decoded by it on a corpus of hard cases) must give the library's ids
// with and without special tokens, and its decoded text with and without skipping special
// tokens. Then the refusals: unknown components, BPE dropout, invalid UTF-8.
#include "zt/data/tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "zt/core/file_io.h"
#include "zt/data/tokenizer/tokenizer.h"

namespace zt {
namespace {

const std::string kDir = ZT_SOURCE_DIR "/tests/fixtures/tokenizers/";

struct Case {
  std::string text;
  std::vector<int32_t> ids, ids_special;
  std::string decoded, decoded_skip;
};

std::vector<Case> read_cases(const std::string& kind) {
  std::ifstream in(kDir + kind + "/expected.jsonl");
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    out.push_back({j["text"], j["ids"], j["ids_special"], j["decoded"], j["decoded_skip"]});
  }
  return out;
}

class HfTokenizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerFixture, IdsAndTextEqualTheLibrary) {
  auto tok = tokenizer_load(kDir + GetParam());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const auto cases = read_cases(GetParam());
  ASSERT_GE(cases.size(), 60u);
  size_t nonempty = 0;
  for (const Case& c : cases) {
    auto ids = (*tok)->encode(c.text, false);
    ASSERT_TRUE(ids.is_ok()) << ids.status().message();
    EXPECT_EQ(*ids, c.ids) << "text: " << c.text;
    auto ids_special = (*tok)->encode(c.text, true);
    ASSERT_TRUE(ids_special.is_ok());
    EXPECT_EQ(*ids_special, c.ids_special) << "text: " << c.text;
    EXPECT_EQ((*tok)->decode(c.ids, false), c.decoded) << "text: " << c.text;
    EXPECT_EQ((*tok)->decode(c.ids_special, true), c.decoded_skip) << "text: " << c.text;
    nonempty += !c.ids.empty();
  }
  EXPECT_GT(nonempty, cases.size() * 3 / 4);  // whitespace-only cases are empty for some
}

TEST_P(HfTokenizerFixture, ThreadsGiveTheSameIds) {
  auto tok = tokenizer_load(kDir + GetParam());
  ASSERT_TRUE(tok.is_ok());
  const auto cases = read_cases(GetParam());
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {  // the second and third passes hit the word cache
        got[t].clear();
        for (const Case& c : cases) (void)(*tok)->encode_append(c.text, true, got[t]);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<int32_t> want;
  for (const Case& c : cases) want.insert(want.end(), c.ids_special.begin(), c.ids_special.end());
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], want) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(Families, HfTokenizerFixture,
                         ::testing::Values("gpt2", "opt", "llama3", "qwen2", "llama2",
                                           "llama2_metaspace", "bert", "bert_cased_nfd",
                                           "roberta_like", "nfkc_digits"));

TEST(HfTokenizer, SpecialTokensComeFromTheConfigOrTheUsualNames) {
  auto llama = tokenizer_load(kDir + "llama2");
  ASSERT_TRUE(llama.is_ok());
  EXPECT_EQ((*llama)->special_ids().bos, (*llama)->token_to_id("<s>"));
  EXPECT_EQ((*llama)->special_ids().eos, (*llama)->token_to_id("</s>"));
  EXPECT_FALSE((*llama)->special_ids().pad.has_value());  // null in tokenizer_config.json
  auto bert = tokenizer_load(kDir + "bert/tokenizer.json");
  ASSERT_TRUE(bert.is_ok());
  EXPECT_EQ((*bert)->special_ids().unk, (*bert)->token_to_id("[UNK]"));
  EXPECT_TRUE((*bert)->is_special(*(*bert)->token_to_id("[CLS]")));
  EXPECT_FALSE((*bert)->is_special(*(*bert)->token_to_id("the")));
}

// The gpt2 fixture's JSON with one component replaced.
std::string gpt2_with(const char* key, const nlohmann::json& value) {
  auto text = file_read_all(kDir + "gpt2/tokenizer.json", "fixture", 1 << 26);
  auto j = nlohmann::json::parse(*text);
  if (std::string(key) == "model.dropout") {
    j["model"]["dropout"] = value;
  } else {
    j[key] = value;
  }
  return j.dump();
}

TEST(HfTokenizer, UnknownComponentsAreRefusedByTypeAndPath) {
  auto r = HfTokenizer::from_json(
      gpt2_with("pre_tokenizer", {{"type", "Sequence"},
                                  {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "UnicodeScripts"}}}}}),
      "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'UnicodeScripts'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("pre_tokenizer.pretokenizers[1]"), std::string::npos);
  r = HfTokenizer::from_json(gpt2_with("normalizer", {{"type", "Precompiled"}}), "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'Precompiled'"), std::string::npos);
  r = HfTokenizer::from_json(gpt2_with("decoder", {{"type", "CTC"}}), "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'CTC'"), std::string::npos);
  r = HfTokenizer::from_json(gpt2_with("model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}),
                             "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'Unigram'"), std::string::npos);
  r = HfTokenizer::from_json(gpt2_with("model.dropout", 0.1), "t.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("dropout"), std::string::npos);
  r = HfTokenizer::from_json("{\"model\": 3", "t.json");
  ASSERT_FALSE(r.is_ok());
}

TEST(HfTokenizer, InvalidUtf8IsAnErrorWithItsOffset) {
  auto tok = tokenizer_load(kDir + "gpt2");
  ASSERT_TRUE(tok.is_ok());
  auto r = (*tok)->encode("ok \xC3\x28 no", false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("byte 3"), std::string::npos) << r.status().message();
  // Overlong, surrogate and out-of-range forms.
  EXPECT_EQ(utf8_invalid_offset("\xC0\xAF"), 0u);
  EXPECT_EQ(utf8_invalid_offset("a\xED\xA0\x80"), 1u);
  EXPECT_EQ(utf8_invalid_offset("ab\xF4\x90\x80\x80"), 2u);
  EXPECT_FALSE(utf8_invalid_offset("h\xC3\xA9 \xF0\x9F\x91\x8B").has_value());
  // Repair as Python's errors="replace": one U+FFFD per maximal invalid subpart.
  EXPECT_EQ(utf8_repair("a\xF0\x9F\x91z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(utf8_repair("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(HfTokenizer, OutOfVocabularyIdsDecodeToReplacement) {
  auto tok = tokenizer_load(kDir + "gpt2");
  ASSERT_TRUE(tok.is_ok());
  const int32_t past = static_cast<int32_t>((*tok)->vocab_size());
  EXPECT_EQ((*tok)->decode(std::vector<int32_t>{past}, false), "\xEF\xBF\xBD");
}

TEST(TokenizerLoad, NamesWhatIsMissing) {
  auto r = tokenizer_load("/nonexistent/tok.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("/nonexistent/tok.json"), std::string::npos);
  r = tokenizer_load(ZT_SOURCE_DIR "/tests");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no tokenizer.json"), std::string::npos);
  auto bytes = tokenizer_load("bytes");
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_EQ((*bytes)->vocab_size(), 257);
  EXPECT_EQ((*bytes)->special_ids().eos, 256);
}

}  // namespace
}  // namespace zt
