// The pipeline steps of tokenizer.json other than the model: normalizers, pre-tokenizers,
// post-processors and decoders, each read from its JSON object and run as `tokenizers` runs it
// (hf_tokenizer.h lists the supported types).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "zt/core/status.h"

namespace zt::tok {

class Model;

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual Status apply(std::string& s) const = 0;
};

// A piece of text on its way to the model. `first`: it starts where the input text starts
// (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  std::string_view s;
  bool first = false;
};

// Owned strings for the pieces that pre-tokenizers rewrite (stable addresses; reused).
class Arena {
 public:
  std::string& make() {
    if (used_ == strings_.size()) strings_.emplace_back();
    std::string& s = strings_[used_++];
    s.clear();
    return s;
  }
  void reset() { used_ = 0; }

 private:
  std::deque<std::string> strings_;
  size_t used_ = 0;
};

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their pre-tokenized pieces (empty pieces are dropped).
  virtual Status apply(std::vector<Piece>& pieces, Arena& arena) const = 0;
};

struct PostProcessor {
  virtual ~PostProcessor() = default;
  // The ids of one sequence with the special tokens added (only called when they are asked for).
  virtual void single(std::vector<int32_t>& ids) const = 0;
};

struct Decoder {
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Each returns nullptr for a JSON null. `path` is the JSON path for errors ("normalizer",
// "pre_tokenizer.pretokenizers[1]"); `where` the file.
Result<std::unique_ptr<Normalizer>> normalizer_from_json(const nlohmann::json& j,
                                                         const std::string& path,
                                                         const std::string& where);
// `model_takes_bytes`: the model maps bytes itself, so a ByteLevel pre-tokenizer that is the
// last step only splits (set to false by this call when the last step is not ByteLevel).
Result<std::unique_ptr<PreTokenizer>> pre_tokenizer_from_json(const nlohmann::json& j,
                                                              const std::string& path,
                                                              const std::string& where,
                                                              bool* model_takes_bytes);
Result<std::unique_ptr<PostProcessor>> post_processor_from_json(
    const nlohmann::json& j, const std::string& path, const std::string& where);
Result<std::unique_ptr<Decoder>> decoder_from_json(const nlohmann::json& j,
                                                   const std::string& path,
                                                   const std::string& where);

}  // namespace zt::tok
