// Byte tokenizer (src/zt/data/tokenizer/byte_tokenizer.h): token ids against the byte values written out
// here, exact round trip of every byte, and the decoding of the special and unknown tokens.
#include "zt/data/tokenizer/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zt {
namespace {

TEST(ByteTokenizer, TokensAreByteValues) {
  // "hé" in UTF-8 is 68 C3 A9; bytes >= 0x80 must not come out negative.
  EXPECT_EQ(ByteTokenizer::encode_bytes("h\xC3\xA9\x01\xFF"),
            (std::vector<int32_t>{104, 195, 169, 1, 255}));
  EXPECT_TRUE(ByteTokenizer::encode_bytes("").empty());
  EXPECT_EQ(ByteTokenizer::kVocabSize, 257);
  EXPECT_EQ(ByteTokenizer::kEot, 256);
}

TEST(ByteTokenizer, EveryByteRoundTrips) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  all += all;  // twice, embedded NULs and all
  const std::vector<int32_t> tokens = ByteTokenizer::encode_bytes(all);
  ASSERT_EQ(tokens.size(), all.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(tokens[i], static_cast<int32_t>(i % 256));
  EXPECT_EQ(ByteTokenizer::decode_bytes(tokens), all);
}

TEST(ByteTokenizer, EncodeAppendExtends) {
  std::vector<int32_t> out = {ByteTokenizer::kEot};
  ByteTokenizer::encode_bytes_append("ab", out);
  EXPECT_EQ(out, (std::vector<int32_t>{256, 97, 98}));
}

TEST(ByteTokenizer, EotDecodesToNewlineAndUnknownToReplacement) {
  EXPECT_EQ(ByteTokenizer::decode_bytes(std::vector<int32_t>{72, 105, 256, 33}), "Hi\n!");
  EXPECT_EQ(ByteTokenizer::decode_bytes(std::vector<int32_t>{65, 257, -1, 66}),
            "A\xEF\xBF\xBD\xEF\xBF\xBD"
            "B");
}

}  // namespace
}  // namespace zt
