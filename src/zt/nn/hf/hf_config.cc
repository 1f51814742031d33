#include "zt/nn/hf/hf_config.h"

#include <cmath>

#include "zt/nn/models/family_names.h"

namespace zt::nn {
namespace {

using nlohmann::json;

// Typed reads of config keys: a wrong type or a missing required key names the key.
class Keys {
 public:
  Keys(const json& j, std::string_view where) : j_(j), where_(where) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  Result<int64_t> int_key(const char* key) const {
    if (!has(key)) return invalid_argument("{}: config key '{}' is missing", where_, key);
    return int_or(key, 0);
  }
  Result<int64_t> int_or(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 40)) {
      return invalid_argument("{}: config key '{}' must be a non-negative integer, got {}", where_,
                              key, v.dump());
    }
    return v.get<int64_t>();
  }
  Result<double> num_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number()) {
      return invalid_argument("{}: config key '{}' must be a number, got {}", where_, key,
                              v.dump());
    }
    return v.get<double>();
  }
  Result<bool> bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) {
      return invalid_argument("{}: config key '{}' must be true or false, got {}", where_, key,
                              j_[key].dump());
    }
    return j_[key].get<bool>();
  }
  Result<std::string> str_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) {
      return invalid_argument("{}: config key '{}' must be a string, got {}", where_, key,
                              j_[key].dump());
    }
    return j_[key].get<std::string>();
  }
  Status unsupported(const char* key, const std::string& why) const {
    return invalid_argument("{}: config key '{}' = {} is not supported: {}", where_, key,
                            has(key) ? j_[key].dump() : "(absent)", why);
  }
  const json& raw() const { return j_; }

 private:
  const json& j_;
  std::string where_;
};

Result<kernels::Activation> activation_named(const Keys& k, const char* key,
                                             const std::string& fallback) {
  ZT_ASSIGN_OR_RETURN(std::string a, k.str_or(key, fallback));
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") {
    return kernels::Activation::kGeluTanh;
  }
  if (a == "gelu") return kernels::Activation::kGeluErf;
  if (a == "relu") return kernels::Activation::kRelu;
  if (a == "silu" || a == "swish") return kernels::Activation::kSilu;
  if (a == "tanh") return kernels::Activation::kTanh;
  return k.unsupported(key, "activations are gelu, gelu_new, relu, silu and tanh");
}

std::string activation_name(kernels::Activation a) {
  switch (a) {
    case kernels::Activation::kGeluTanh:
      return "gelu_new";
    case kernels::Activation::kGeluErf:
      return "gelu";
    case kernels::Activation::kRelu:
      return "relu";
    case kernels::Activation::kSilu:
      return "silu";
    case kernels::Activation::kTanh:
      return "tanh";
  }
  return "gelu";
}

// Rotary settings: 5.x's rope_parameters, or 4.x's rope_theta + rope_scaling.
Status read_rope(const Keys& k, RopeConfig& rope) {
  const json* params = nullptr;
  if (k.has("rope_parameters")) {
    params = &k.raw()["rope_parameters"];
  } else if (k.has("rope_scaling")) {
    params = &k.raw()["rope_scaling"];
  }
  ZT_ASSIGN_OR_RETURN(rope.theta, k.num_or("rope_theta", 10000.0));
  if (params == nullptr) return Status::ok();
  const char* key = k.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!params->is_object()) return k.unsupported(key, "it must be an object");
  Keys p(*params, std::string(key));
  if (p.has("rope_theta")) {
    ZT_ASSIGN_OR_RETURN(rope.theta, p.num_or("rope_theta", rope.theta));
  }
  ZT_ASSIGN_OR_RETURN(std::string type, p.str_or("rope_type", "default"));
  if (!p.has("rope_type")) {
    ZT_ASSIGN_OR_RETURN(type, p.str_or("type", "default"));
  }
  if (type != "default" && type != "linear" && type != "llama3") {
    return k.unsupported(key, "rope types are default, linear and llama3");
  }
  if (p.has("partial_rotary_factor")) {
    ZT_ASSIGN_OR_RETURN(double f, p.num_or("partial_rotary_factor", 1.0));
    if (f != 1.0) return k.unsupported(key, "partial_rotary_factor must be 1");
  }
  rope.type = type;
  ZT_ASSIGN_OR_RETURN(rope.factor, p.num_or("factor", 1.0));
  ZT_ASSIGN_OR_RETURN(rope.low_freq_factor, p.num_or("low_freq_factor", 1.0));
  ZT_ASSIGN_OR_RETURN(rope.high_freq_factor, p.num_or("high_freq_factor", 4.0));
  ZT_ASSIGN_OR_RETURN(rope.original_max_positions,
                      p.int_or("original_max_position_embeddings", 8192));
  if (type != "default" && !(rope.factor > 0)) return k.unsupported(key, "factor must be > 0");
  if (type == "llama3" && !(rope.high_freq_factor > rope.low_freq_factor)) {
    return k.unsupported(key, "high_freq_factor must exceed low_freq_factor");
  }
  return Status::ok();
}

Status check_vocab(const Keys& k, TransformerConfig& t) {
  ZT_ASSIGN_OR_RETURN(int64_t v, k.int_key("vocab_size"));
  if (v < 1 || v > (int64_t{1} << 24)) return k.unsupported("vocab_size", "must be in [1, 2^24]");
  t.vocab_size = static_cast<int>(v);
  t.padded_vocab_size = padded_vocab(t.vocab_size);
  return Status::ok();
}

Result<int> small_int(const Keys& k, const char* key) {
  ZT_ASSIGN_OR_RETURN(int64_t v, k.int_key(key));
  if (v < 1 || v > 65536) return k.unsupported(key, "must be in [1, 65536]");
  return static_cast<int>(v);
}

Status read_gpt2(const Keys& k, TransformerConfig& t) {
  ZT_ASSIGN_OR_RETURN(t.n_layer, small_int(k, "n_layer"));
  ZT_ASSIGN_OR_RETURN(t.n_head, small_int(k, "n_head"));
  t.n_kv_head = t.n_head;
  ZT_ASSIGN_OR_RETURN(t.hidden, k.int_key("n_embd"));
  t.head_dim = t.hidden / t.n_head;
  ZT_ASSIGN_OR_RETURN(int64_t inner, k.int_or("n_inner", 4 * t.hidden));
  t.inner = inner;
  ZT_ASSIGN_OR_RETURN(t.max_positions, k.int_or("n_positions", 1024));
  ZT_ASSIGN_OR_RETURN(double eps, k.num_or("layer_norm_epsilon", 1e-5));
  t.norm_eps = static_cast<float>(eps);
  ZT_ASSIGN_OR_RETURN(t.act, activation_named(k, "activation_function", "gelu_new"));
  ZT_ASSIGN_OR_RETURN(bool by_layer, k.bool_or("scale_attn_by_inverse_layer_idx", false));
  if (by_layer) return k.unsupported("scale_attn_by_inverse_layer_idx", "must be false");
  ZT_ASSIGN_OR_RETURN(bool scale, k.bool_or("scale_attn_weights", true));
  if (!scale) return k.unsupported("scale_attn_weights", "must be true");
  t.norm = NormKind::kLayerNorm;
  t.positions = Positions::kLearned;
  t.residual_init_std = t.init_std / std::sqrt(2.0f * static_cast<float>(t.n_layer));
  t.position_init_std = 0.01f;
  return Status::ok();
}

// The keys every family but GPT-2 names alike: layers, heads and width (head size = width /
// heads unless the family reads its own head_dim after this).
Status read_shape(const Keys& k, TransformerConfig& t) {
  ZT_ASSIGN_OR_RETURN(t.n_layer, small_int(k, "num_hidden_layers"));
  ZT_ASSIGN_OR_RETURN(t.n_head, small_int(k, "num_attention_heads"));
  t.n_kv_head = t.n_head;
  ZT_ASSIGN_OR_RETURN(t.hidden, k.int_key("hidden_size"));
  t.head_dim = t.hidden / t.n_head;
  return Status::ok();
}

Status read_llama(const Keys& k, TransformerConfig& t, const std::string& type) {
  ZT_RETURN_IF_ERROR(read_shape(k, t));
  if (k.has("num_key_value_heads")) {
    ZT_ASSIGN_OR_RETURN(t.n_kv_head, small_int(k, "num_key_value_heads"));
  }
  if (t.n_head % t.n_kv_head != 0) {
    return k.unsupported("num_key_value_heads", "it must divide num_attention_heads");
  }
  ZT_ASSIGN_OR_RETURN(t.head_dim, k.int_or("head_dim", t.head_dim));
  ZT_ASSIGN_OR_RETURN(t.inner, k.int_key("intermediate_size"));
  ZT_ASSIGN_OR_RETURN(t.max_positions, k.int_or("max_position_embeddings", 2048));
  ZT_ASSIGN_OR_RETURN(double eps, k.num_or("rms_norm_eps", 1e-6));
  t.norm_eps = static_cast<float>(eps);
  ZT_ASSIGN_OR_RETURN(t.act, activation_named(k, "hidden_act", "silu"));
  if (t.act != kernels::Activation::kSilu) return k.unsupported("hidden_act", "must be silu");
  t.gated = Gated::kYes;
  t.norm = NormKind::kRMSNorm;
  t.positions = Positions::kRotary;
  ZT_RETURN_IF_ERROR(read_rope(k, t.rope));
  if (type == "qwen2") {
    t.qkv_bias = Bias::kWith;
    t.out_bias = Bias::kNone;
    t.mlp_bias = Bias::kNone;
    ZT_ASSIGN_OR_RETURN(bool sliding, k.bool_or("use_sliding_window", false));
    if (sliding) {
      ZT_ASSIGN_OR_RETURN(int64_t window, k.int_or("sliding_window", 0));
      if (window < t.max_positions) {
        return k.unsupported("use_sliding_window",
                             "a sliding window shorter than "
                             "max_position_embeddings changes attention");
      }
    }
  } else {
    ZT_ASSIGN_OR_RETURN(bool attn_bias, k.bool_or("attention_bias", false));
    ZT_ASSIGN_OR_RETURN(bool mlp_bias, k.bool_or("mlp_bias", false));
    t.qkv_bias = t.out_bias = attn_bias ? Bias::kWith : Bias::kNone;
    t.mlp_bias = mlp_bias ? Bias::kWith : Bias::kNone;
    if (k.has("sliding_window")) {
      ZT_ASSIGN_OR_RETURN(int64_t window, k.int_or("sliding_window", 0));
      if (window < t.max_positions) {
        return k.unsupported("sliding_window",
                             "a window shorter than max_position_embeddings "
                             "changes attention");
      }
    }
  }
  ZT_ASSIGN_OR_RETURN(double init, k.num_or("initializer_range", 0.02));
  t.init_std = t.residual_init_std = static_cast<float>(init);
  return Status::ok();
}

Status read_opt(const Keys& k, TransformerConfig& t) {
  ZT_RETURN_IF_ERROR(read_shape(k, t));
  ZT_ASSIGN_OR_RETURN(t.inner, k.int_key("ffn_dim"));
  ZT_ASSIGN_OR_RETURN(t.max_positions, k.int_or("max_position_embeddings", 2048));
  ZT_ASSIGN_OR_RETURN(t.embed_dim, k.int_or("word_embed_proj_dim", t.hidden));
  ZT_ASSIGN_OR_RETURN(t.act, activation_named(k, "activation_function", "relu"));
  ZT_ASSIGN_OR_RETURN(bool pre, k.bool_or("do_layer_norm_before", true));
  t.placement = pre ? NormPlacement::kPre : NormPlacement::kPost;
  ZT_ASSIGN_OR_RETURN(bool removed, k.bool_or("_remove_final_layer_norm", false));
  t.final_norm = pre && !removed;
  ZT_ASSIGN_OR_RETURN(bool affine, k.bool_or("layer_norm_elementwise_affine", true));
  if (!affine) return k.unsupported("layer_norm_elementwise_affine", "must be true");
  ZT_ASSIGN_OR_RETURN(bool bias, k.bool_or("enable_bias", true));
  t.qkv_bias = t.out_bias = t.mlp_bias = bias ? Bias::kWith : Bias::kNone;
  t.norm = NormKind::kLayerNorm;
  t.norm_eps = 1e-5f;
  t.positions = Positions::kLearned;
  t.position_offset = 2;
  ZT_ASSIGN_OR_RETURN(double init, k.num_or("init_std", 0.02));
  t.init_std = t.residual_init_std = t.position_init_std = static_cast<float>(init);
  return Status::ok();
}

Status read_bert(const Keys& k, TransformerConfig& t) {
  ZT_RETURN_IF_ERROR(read_shape(k, t));
  ZT_ASSIGN_OR_RETURN(t.inner, k.int_key("intermediate_size"));
  ZT_ASSIGN_OR_RETURN(t.max_positions, k.int_or("max_position_embeddings", 512));
  ZT_ASSIGN_OR_RETURN(t.type_vocab, k.int_or("type_vocab_size", 2));
  ZT_ASSIGN_OR_RETURN(double eps, k.num_or("layer_norm_eps", 1e-12));
  t.norm_eps = static_cast<float>(eps);
  ZT_ASSIGN_OR_RETURN(t.act, activation_named(k, "hidden_act", "gelu"));
  ZT_ASSIGN_OR_RETURN(std::string pos, k.str_or("position_embedding_type", "absolute"));
  if (pos != "absolute") return k.unsupported("position_embedding_type", "must be absolute");
  ZT_ASSIGN_OR_RETURN(bool decoder, k.bool_or("is_decoder", false));
  if (decoder) return k.unsupported("is_decoder", "BERT runs as an encoder");
  t.norm = NormKind::kLayerNorm;
  t.placement = NormPlacement::kPost;
  t.final_norm = false;
  t.embed_norm = true;
  t.positions = Positions::kLearned;
  // The head comes from `architectures`: BertForSequenceClassification (pooler + classifier,
  // single-label cross-entropy), else the masked-LM head (BertForMaskedLM, BertForPreTraining,
  // BertModel checkpoints).
  t.task = Task::kMaskedLM;
  if (k.has("architectures") && k.raw()["architectures"].is_array()) {
    for (const json& a : k.raw()["architectures"]) {
      if (a == "BertForSequenceClassification") t.task = Task::kSequenceClassification;
    }
  }
  if (t.task == Task::kSequenceClassification) {
    int64_t labels = 2;
    if (k.has("id2label") && k.raw()["id2label"].is_object()) {
      labels = static_cast<int64_t>(k.raw()["id2label"].size());
    }
    ZT_ASSIGN_OR_RETURN(labels, k.int_or("num_labels", labels));
    ZT_ASSIGN_OR_RETURN(std::string problem, k.str_or("problem_type", ""));
    if (labels < 2 || labels > 65536) {
      return k.unsupported("num_labels", "sequence classification needs 2 to 65536 labels "
                                         "(1 label is regression, which ZeroTrain does not train)");
    }
    if (!problem.empty() && problem != "single_label_classification") {
      return k.unsupported("problem_type", "only single_label_classification is supported");
    }
    t.num_labels = static_cast<int>(labels);
  }
  ZT_ASSIGN_OR_RETURN(double init, k.num_or("initializer_range", 0.02));
  t.init_std = t.residual_init_std = t.position_init_std = static_cast<float>(init);
  return Status::ok();
}

// A decoder's <Family>ForSequenceClassification (any of `architectures`) is a reward model: the
// value head `score` (hidden -> 1, no bias) read at the last real token. transformers' default
// is 2 labels (id2label's size when given); a reward model has num_labels 1.
Status read_reward_head(const Keys& k, TransformerConfig& t) {
  if (!k.has("architectures") || !k.raw()["architectures"].is_array()) return Status::ok();
  bool reward = false;
  for (const json& a : k.raw()["architectures"]) {
    const std::string_view tail = "ForSequenceClassification";
    if (a.is_string() && a.get<std::string>().size() > tail.size() &&
        a.get<std::string>().compare(a.get<std::string>().size() - tail.size(), tail.size(),
                                     tail) == 0) {
      reward = true;
    }
  }
  if (!reward) return Status::ok();
  int64_t labels = 2;
  if (k.has("id2label") && k.raw()["id2label"].is_object()) {
    labels = static_cast<int64_t>(k.raw()["id2label"].size());
  }
  ZT_ASSIGN_OR_RETURN(labels, k.int_or("num_labels", labels));
  if (labels != 1) {
    return k.unsupported("num_labels",
                         "a decoder's ...ForSequenceClassification is read as a "
                         "reward model, with one score (num_labels 1)");
  }
  t.task = Task::kReward;
  t.num_labels = 1;
  return Status::ok();
}

// The registry of families, keyed by config.json's model_type: the family ZeroTrain builds for
// it and the reader of its keys. Mistral (without a sliding window) is Llama's structure.
struct Family {
  const char* model_type;
  const char* builds;
  Status (*read)(const Keys& k, TransformerConfig& t);
};
constexpr Family kFamilies[] = {
    {"gpt2", "gpt2", [](const Keys& k, TransformerConfig& t) { return read_gpt2(k, t); }},
    {"llama", "llama", [](const Keys& k, TransformerConfig& t) { return read_llama(k, t, "llama"); }},
    {"mistral", "llama",
     [](const Keys& k, TransformerConfig& t) { return read_llama(k, t, "mistral"); }},
    {"qwen2", "qwen2", [](const Keys& k, TransformerConfig& t) { return read_llama(k, t, "qwen2"); }},
    {"opt", "opt", [](const Keys& k, TransformerConfig& t) { return read_opt(k, t); }},
    {"bert", "bert", [](const Keys& k, TransformerConfig& t) { return read_bert(k, t); }},
};

}  // namespace

const std::vector<std::string>& hf_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> v;
    for (const Family& f : kFamilies) v.emplace_back(f.model_type);
    return v;
  }();
  return types;
}

Result<TransformerConfig> transformer_config_from_hf(const json& config, std::string_view where) {
  if (!config.is_object()) return invalid_argument("{}: not a JSON object", where);
  Keys k(config, where);
  ZT_ASSIGN_OR_RETURN(std::string type, k.str_or("model_type", ""));
  TransformerConfig t;
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (type == f.model_type) family = &f;
  }
  if (family == nullptr) {
    std::string known;
    for (const auto& n : hf_model_types()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument(
        "{}: config key 'model_type' = '{}' is not a family ZeroTrain builds "
        "(known: {})",
        where, type, known);
  }
  t.model_type = family->builds;
  ZT_RETURN_IF_ERROR(family->read(k, t));
  if (t.model_type != "bert") ZT_RETURN_IF_ERROR(read_reward_head(k, t));
  ZT_RETURN_IF_ERROR(check_vocab(k, t));
  if (t.embed_dim == 0) t.embed_dim = t.hidden;
  if (t.head_dim == 0 || t.n_head * t.head_dim == 0 ||
      (t.model_type != "llama" && t.model_type != "qwen2" && t.hidden % t.n_head != 0)) {
    return invalid_argument("{}: the width {} does not split into {} heads", where, t.hidden,
                            t.n_head);
  }
  if (t.positions == Positions::kRotary && t.head_dim % 2 != 0) {
    return invalid_argument("{}: rotary embeddings need an even head size, got {}", where,
                            t.head_dim);
  }
  const bool tied_default = t.model_type != "llama" && t.model_type != "qwen2";
  ZT_ASSIGN_OR_RETURN(bool tied, k.bool_or("tie_word_embeddings", tied_default));
  if (t.model_type == "bert") tied = true;  // the MLM decoder is the word embedding
  t.tied = tied ? Tied::kYes : Tied::kNo;
  if (t.model_type == "gpt2" && !tied) {
    return k.unsupported("tie_word_embeddings", "GPT-2's head is its token embedding");
  }
  return t;
}

namespace {

// A float setting as the decimal it was written as (1e-05, not 9.99999974737875e-06): the
// shortest text that reads back to the same float, as a double.
double decimal(float v) {
  return std::stod(fmt::format("{}", v));
}

// The inverse of read_shape: the keys every family but GPT-2 names alike.
void write_shape(const TransformerConfig& c, json& j) {
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["hidden_size"] = c.hidden;
}

}  // namespace

json hf_config_from_transformer(const TransformerConfig& c) {
  json j;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied == Tied::kYes;
  if (c.model_type == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_embd"] = c.hidden;
    j["n_inner"] = c.inner;
    j["n_positions"] = c.max_positions;
    j["n_ctx"] = c.max_positions;
    j["layer_norm_epsilon"] = decimal(c.norm_eps);
    j["activation_function"] = activation_name(c.act);
    j["padded_vocab_size"] = c.padded_vocab_size;
  } else if (c.model_type == "llama" || c.model_type == "qwen2") {
    j["architectures"] = {c.model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    write_shape(c, j);
    j["num_key_value_heads"] = c.n_kv_head;
    j["head_dim"] = c.head_dim;
    j["intermediate_size"] = c.inner;
    j["max_position_embeddings"] = c.max_positions;
    j["rms_norm_eps"] = decimal(c.norm_eps);
    j["hidden_act"] = "silu";
    j["rope_theta"] = c.rope.theta;
    if (c.rope.type != "default") {
      json s = {{"rope_type", c.rope.type}, {"factor", c.rope.factor}};
      if (c.rope.type == "llama3") {
        s["low_freq_factor"] = c.rope.low_freq_factor;
        s["high_freq_factor"] = c.rope.high_freq_factor;
        s["original_max_position_embeddings"] = c.rope.original_max_positions;
      }
      j["rope_scaling"] = s;
    }
    if (c.model_type == "llama") {
      j["attention_bias"] = c.qkv_bias == Bias::kWith;
      j["mlp_bias"] = c.mlp_bias == Bias::kWith;
    } else {
      j["use_sliding_window"] = false;
    }
    j["initializer_range"] = decimal(c.init_std);
  } else if (c.model_type == "opt") {
    j["architectures"] = {"OPTForCausalLM"};
    write_shape(c, j);
    j["ffn_dim"] = c.inner;
    j["max_position_embeddings"] = c.max_positions;
    j["word_embed_proj_dim"] = c.embed_dim;
    j["activation_function"] = activation_name(c.act);
    j["do_layer_norm_before"] = c.placement == NormPlacement::kPre;
    j["enable_bias"] = c.qkv_bias == Bias::kWith;
    j["init_std"] = decimal(c.init_std);
  } else {
    if (c.task == Task::kSequenceClassification) {
      j["architectures"] = {"BertForSequenceClassification"};
      j["num_labels"] = c.num_labels;
      j["problem_type"] = "single_label_classification";
      json id2label = json::object(), label2id = json::object();
      for (int i = 0; i < c.num_labels; ++i) {
        id2label[std::to_string(i)] = fmt::format("LABEL_{}", i);
        label2id[fmt::format("LABEL_{}", i)] = i;
      }
      j["id2label"] = id2label;
      j["label2id"] = label2id;
    } else {
      j["architectures"] = {"BertForMaskedLM"};
    }
    write_shape(c, j);
    j["intermediate_size"] = c.inner;
    j["max_position_embeddings"] = c.max_positions;
    j["type_vocab_size"] = c.type_vocab;
    j["layer_norm_eps"] = decimal(c.norm_eps);
    j["hidden_act"] = activation_name(c.act);
    j["position_embedding_type"] = "absolute";
    j["initializer_range"] = decimal(c.init_std);
  }
  if (c.task == Task::kReward) {  // the value head: transformers' sequence classifier, 1 label
    j["architectures"] = {
        fmt::format("{}ForSequenceClassification", hf_class_prefix(c.model_type))};
    j["num_labels"] = 1;
    j["id2label"] = {{"0", "LABEL_0"}};
    j["label2id"] = {{"LABEL_0", 0}};
  }
  return j;
}

}  // namespace zt::nn
