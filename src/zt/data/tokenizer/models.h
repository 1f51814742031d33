// The two models of tokenizer.json that ZeroTrain's families use, run as `tokenizers` runs them:
// BPE (merges by rank with the library's priority-queue order, byte_fallback, fuse_unk,
// ignore_merges, continuing_subword_prefix, end_of_word_suffix) and WordPiece (greedy longest
// match first with the "##" prefix, [UNK] for a word it cannot cover or one that is too long).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "zt/core/status.h"

namespace zt::tok {

// Hash and equality that let a std::string-keyed map be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The GPT-2 byte <-> character table of the ByteLevel components.
const std::string& byte_level_char(unsigned char b);  // UTF-8 of byte b's character
// The byte a ByteLevel character stands for, or -1.
int byte_level_byte(char32_t c);

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized piece. With raw_bytes the piece is the bytes a final
  // ByteLevel pre-tokenizer would have mapped to characters (the model maps them itself).
  virtual void tokenize(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual const std::string* id_to_token(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;  // largest id + 1
  virtual std::optional<int32_t> unk_id() const = 0;
  // Whether tokenize accepts raw bytes (BPE without a subword prefix or word suffix).
  virtual bool supports_raw_bytes() const { return false; }
  uint64_t instance_id() const { return instance_id_; }

 protected:
  Model();

 private:
  uint64_t instance_id_;
};

// `model` is the "model" object of tokenizer.json; `where` names the file in errors.
Result<std::unique_ptr<Model>> model_from_json(const nlohmann::json& model, const std::string& where);

}  // namespace zt::tok
