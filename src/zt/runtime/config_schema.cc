// Field validation and JSON reading for ds_config (see config_schema.h). Pydantic's "lax mode"
// is the model for value conversion: DeepSpeed validates its blocks with pydantic v2, which
// takes 5e8 for an int field, 1 or "true" for a bool, and rejects 2.5 for an int.
#include "zt/runtime/config_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace zt::config_detail {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Result<Json> to_bool(const Json& v, std::string_view what) {
  if (v.is_boolean()) return Json(v.get<bool>());
  if (v.is_number_integer() || v.is_number_unsigned()) {
    // pydantic: 0 and 1 only.
    if (v == 0) return Json(false);
    if (v == 1) return Json(true);
  }
  if (v.is_string()) {
    const std::string s = lower(v.get<std::string>());
    for (const char* t : {"1", "on", "t", "true", "y", "yes"}) {
      if (s == t) return Json(true);
    }
    for (const char* f : {"0", "off", "f", "false", "n", "no"}) {
      if (s == f) return Json(false);
    }
  }
  return invalid_argument("{} must be true or false, got {}", what, v.dump());
}

Result<Json> to_int(const Json& v, std::string_view what) {
  if (v.is_number_integer()) return Json(v.get<int64_t>());
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument("{} = {} is too large (the limit is 2^63-1)", what, v.dump());
    }
    return Json(v.get<int64_t>());
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 5e8 is a float in JSON; pydantic takes it for an int field when it has no fraction.
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18) {
      return Json(static_cast<int64_t>(d));
    }
    return invalid_argument("{} must be an integer, got {}", what, v.dump());
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    int64_t x = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) return Json(x);
  }
  return invalid_argument("{} must be an integer, got {}", what, v.dump());
}

Result<Json> to_number(const Json& v, std::string_view what) {
  if (v.is_number()) return Json(v.get<double>());
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Json(d);
  }
  return invalid_argument("{} must be a number, got {}", what, v.dump());
}

double as_double(const Json& v) {
  return v.is_number() ? v.get<double>() : 0.0;
}

}  // namespace

bool ResolvedBlock::was_given(std::string_view out_name) const {
  return std::find(given.begin(), given.end(), out_name) != given.end();
}

bool value_is_auto(const Json& v) {
  return v.is_string() && v.get<std::string>() == "auto";
}

Status auto_unresolved(std::string_view what) {
  return invalid_argument(
      "{} is \"auto\": \"auto\" must be resolved by the caller before ZeroTrain reads the config "
      "(as the Hugging Face Trainer and Accelerate do); write the value itself. (DeepSpeed would "
      "take the string literally here and fail later.)",
      what);
}

Result<Json> value_convert(const Json& v, const FieldSpec& f, std::string_view what) {
  if (v.is_null()) {
    if (f.flags & kNullable) return Json(nullptr);
    return invalid_argument("{} must not be null", what);
  }
  Json out;
  switch (f.kind) {
    case FieldKind::kBool: {
      ZT_ASSIGN_OR_RETURN(out, to_bool(v, what));
      break;
    }
    case FieldKind::kInt: {
      ZT_ASSIGN_OR_RETURN(out, to_int(v, what));
      break;
    }
    case FieldKind::kNumber: {
      ZT_ASSIGN_OR_RETURN(out, to_number(v, what));
      break;
    }
    case FieldKind::kString: {
      if (!v.is_string()) return invalid_argument("{} must be a string, got {}", what, v.dump());
      std::string s = v.get<std::string>();
      if (f.flags & kUpperCase) s = upper(s);
      if (!f.choices.empty()) {
        bool ok = false;
        std::string_view rest = f.choices;
        while (!rest.empty()) {
          size_t bar = rest.find('|');
          std::string_view c = rest.substr(0, bar);
          if (c == s) ok = true;
          rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
        }
        if (!ok) {
          return invalid_argument("{} = \"{}\" is not valid; expected one of {}", what, s,
                                  f.choices);
        }
      }
      out = s;
      break;
    }
    case FieldKind::kList:
      if (!v.is_array()) return invalid_argument("{} must be a list, got {}", what, v.dump());
      out = v;
      break;
    case FieldKind::kObject:
      if (!v.is_object()) return invalid_argument("{} must be an object, got {}", what, v.dump());
      out = v;
      break;
    case FieldKind::kAny:
      out = v;
      break;
  }
  if ((f.flags & kNonNegative) && out.is_number() && as_double(out) < 0) {
    return invalid_argument("{} must be >= 0, got {}", what, v.dump());
  }
  if ((f.flags & kPositive) && out.is_number() && as_double(out) <= 0) {
    return invalid_argument("{} must be > 0, got {}", what, v.dump());
  }
  return out;
}

std::string key_nearest(std::string_view key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = edit_distance(key, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Close enough to be a typo: a third of the key's length, at least 2 edits.
  size_t limit = std::max<size_t>(2, key.size() / 3);
  if (best_d <= limit) return best;
  // Else a key that contains this one ("min_lr" -> "lr_range_test_min_lr"), the shortest.
  std::string sub;
  for (const auto& c : candidates) {
    if (key.size() >= 3 && c.find(key) != std::string::npos &&
        (sub.empty() || c.size() < sub.size())) {
      sub = c;
    }
  }
  return sub;
}

Status unknown_key(std::string_view path, std::string_view key,
                   const std::vector<std::string>& candidates) {
  std::string near = key_nearest(key, candidates);
  if (!near.empty()) {
    return invalid_argument("{}: unknown key \"{}\"; did you mean \"{}\"?", path, key, near);
  }
  std::string all;
  for (const auto& c : candidates) all += (all.empty() ? "" : ", ") + c;
  return invalid_argument("{}: unknown key \"{}\"; valid keys: {}", path, key, all);
}

Result<ResolvedBlock> block_resolve(const Json& given, const BlockSpec& spec,
                                    std::vector<std::string>& warnings) {
  if (!given.is_null() && !given.is_object()) {
    return invalid_argument("{} must be a JSON object {{...}}, got {}", spec.path, given.dump());
  }
  std::vector<std::string> candidates;
  for (const auto& f : spec.fields) {
    if (!f.alias.empty()) candidates.emplace_back(f.alias);
    candidates.emplace_back(f.name);
  }
  ResolvedBlock out;
  if (given.is_object()) {
    for (const auto& [k, v] : given.items()) {
      const FieldSpec* f = nullptr;
      for (const auto& cand : spec.fields) {
        if (cand.name == k || (!cand.alias.empty() && cand.alias == k)) f = &cand;
      }
      const std::string what = fmt::format("{}.{}", spec.path, k);
      if (f == nullptr) {
        if (spec.kind != BlockKind::kPlain) return unknown_key(spec.path, k, candidates);
        std::string near = key_nearest(k, candidates);
        warnings.push_back(
            fmt::format("{}: unknown key \"{}\" ignored (as DeepSpeed does){}", spec.path, k,
                        near.empty() ? "" : fmt::format("; did you mean \"{}\"?", near)));
        continue;
      }
      const std::string out_name(f->out_name());
      if (!f->alias.empty() && given.contains(f->alias) && given.contains(f->name)) {
        return invalid_argument(
            "{}: both \"{}\" and \"{}\" are given; they are the same setting, "
            "keep one",
            spec.path, f->alias, f->name);
      }
      if (value_is_auto(v) && f->kind != FieldKind::kAny) {
        if (spec.kind == BlockKind::kPydantic) continue;  // DeepSpeedConfigModel drops "auto"
        return auto_unresolved(what);
      }
      ZT_ASSIGN_OR_RETURN(Json converted, value_convert(v, *f, what));
      out.values[out_name] = converted;
      out.given.push_back(out_name);
    }
  }
  for (const auto& f : spec.fields) {
    const std::string out_name(f.out_name());
    if (out.values.contains(out_name)) {
      if (f.flags & kNotActedOn) {
        Json def = Json::parse(f.default_json);
        const Json& got = out.values[out_name];
        bool same = got == def ||
                    (got.is_number() && def.is_number() && got.get<double>() == def.get<double>());
        if (!same) {
          warnings.push_back(fmt::format("{}.{} = {}: parsed but not acted on by ZeroTrain yet",
                                         spec.path, out_name, got.dump()));
        }
      }
      continue;
    }
    if (f.flags & kRequired) {
      return invalid_argument("{}: missing required key \"{}\"", spec.path, out_name);
    }
    out.values[out_name] = Json::parse(f.default_json);
  }
  return out;
}

std::string py_str_list(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += fmt::format("{}'{}'", i ? ", " : "", items[i]);
  return s + "]";
}

}  // namespace zt::config_detail
