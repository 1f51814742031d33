// Pipeline partitioning (partition.h): DeepSpeed's partition_method, partition_uniform and
// partition_balanced.
#include "zt/pipe/partition.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <typeinfo>

#include <fmt/format.h>

#include "zt/core/assert.h"
#include "zt/data/tokenizer/regex.h"
#include "zt/nn/model.h"

namespace zt::pipe {
namespace {

// "zt::nn::TransformerBlock" -> "TransformerBlock": the name a user writes in type:<regex>, as
// DeepSpeed matches a layer's class __name__ (no module path).
std::string class_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? demangled.get() : type.name();
  // Strip the namespaces of the class itself, not those inside template arguments.
  const size_t args = name.find('<');
  const size_t colon = name.rfind("::", args == std::string::npos ? std::string::npos : args);
  if (colon != std::string::npos) name.erase(0, colon + 2);
  return name;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string distinct_types(std::span<const UnitInfo> units) {
  std::vector<std::string> seen;
  for (const UnitInfo& u : units) {
    if (std::find(seen.begin(), seen.end(), u.type_name) == seen.end()) seen.push_back(u.type_name);
  }
  std::string out;
  for (const std::string& s : seen) out += fmt::format("{}{}", out.empty() ? "" : ", ", s);
  return out;
}

}  // namespace

std::vector<UnitInfo> describe_units(const nn::Model& model) {
  std::vector<UnitInfo> out;
  for (const auto& unit : model.units()) {
    UnitInfo info{.type_name = class_name(typeid(*unit))};
    if (!unit->frozen()) {
      for (const nn::Param* p : unit->params()) info.trainable_params += p->numel();
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<PartitionMethod> parse_partition_method(std::string_view method) {
  // DeepSpeed lowercases the whole method, the regex included, and keeps the text between the
  // first and the second ':' as the regex.
  const std::string m = ascii_lower(method);
  if (m == "uniform") return PartitionMethod{.kind = PartitionKind::kUniform};
  if (m == "parameters") return PartitionMethod{.kind = PartitionKind::kParameters};
  if (m == "compute") return PartitionMethod{.kind = PartitionKind::kCompute};
  if (m.starts_with("type:")) {
    const std::string rest = m.substr(5);
    return PartitionMethod{.kind = PartitionKind::kType,
                           .type_regex = rest.substr(0, rest.find(':'))};
  }
  return invalid_argument(
      "partition_method '{}' is not supported; use 'uniform', 'parameters', 'type:<regex>' or "
      "'compute'",
      method);
}

std::vector<int> partition_uniform(int num_items, int num_parts) {
  ZT_ASSERT(num_items >= 0 && num_parts >= 1, "partition_uniform({}, {})", num_items, num_parts);
  std::vector<int> parts(static_cast<size_t>(num_parts) + 1);
  if (num_items <= num_parts) {
    for (int p = 0; p <= num_parts; ++p) parts[static_cast<size_t>(p)] = std::min(p, num_items);
    return parts;
  }
  const int chunk = num_items / num_parts;
  const int residual = num_items - chunk * num_parts;
  for (int p = 0; p <= num_parts; ++p)
    parts[static_cast<size_t>(p)] = p * chunk + std::min(p, residual);
  return parts;
}

std::vector<int> partition_balanced(std::span<const int64_t> weights, int num_parts) {
  ZT_ASSERT(num_parts >= 1, "partition_balanced into {} parts", num_parts);
  const int n = static_cast<int>(weights.size());
  const int m = num_parts;
  if (n <= m) return partition_uniform(n, m);

  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    ZT_ASSERT(weights[static_cast<size_t>(i)] >= 0, "negative partition weight at {}", i);
    prefix[static_cast<size_t>(i) + 1] =
        prefix[static_cast<size_t>(i)] + weights[static_cast<size_t>(i)];
  }
  // The best split of the first i items into j parts: its largest and smallest part, max - min,
  // and where its last part starts. DeepSpeed fills only j <= min(i, m); other states stay
  // infinite, which makes every split through them lose to any finite one, so they are skipped
  // here. State (0, 0) has max 0 and min +infinity.
  struct Cell {
    bool valid = false;
    int64_t max = 0, min = 0, cost = 0;
    int pos = 0;
  };
  const auto at = [m](int i, int j) {
    return static_cast<size_t>(i) * static_cast<size_t>(m + 1) + static_cast<size_t>(j);
  };
  std::vector<Cell> dp(static_cast<size_t>(n + 1) * static_cast<size_t>(m + 1));
  dp[at(0, 0)] = {.valid = true, .max = 0, .min = 0, .cost = 0, .pos = 0};
  for (int i = 1; i <= n; ++i) {
    for (int j = 1; j <= std::min(i, m); ++j) {
      Cell& best = dp[at(i, j)];
      for (int k = 0; k < i; ++k) {
        const Cell& prev = dp[at(k, j - 1)];
        if (!prev.valid) continue;
        const int64_t last = prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(k)];
        const bool empty = j - 1 == 0;  // prev is (0, 0): min is +infinity
        const int64_t hi = std::max(prev.max, last);
        const int64_t lo = empty ? last : std::min(prev.min, last);
        // `<=`: a later split wins a tie, as DeepSpeed's `dp_cost[i, j] >= cost` update.
        if (!best.valid || hi - lo <= best.cost)
          best = {.valid = true, .max = hi, .min = lo, .cost = hi - lo, .pos = k};
      }
    }
  }
  std::vector<int> parts(static_cast<size_t>(m) + 1);
  parts[static_cast<size_t>(m)] = n;
  for (int j = m; j >= 1; --j) {
    const Cell& c = dp[at(parts[static_cast<size_t>(j)], j)];
    ZT_ASSERT(c.valid, "partition_balanced reached an empty state ({}, {})",
              parts[static_cast<size_t>(j)], j);
    parts[static_cast<size_t>(j) - 1] = c.pos;
  }
  return parts;
}

Result<std::vector<int64_t>> partition_weights(std::span<const UnitInfo> units,
                                               const PartitionMethod& method) {
  std::vector<int64_t> weights(units.size(), 0);
  if (method.kind == PartitionKind::kParameters) {
    for (size_t i = 0; i < units.size(); ++i) weights[i] = units[i].trainable_params;
    return weights;
  }
  if (method.kind == PartitionKind::kUniform) {
    for (int64_t& w : weights) w = 1;
    return weights;
  }
  if (method.kind == PartitionKind::kCompute) {
    for (size_t i = 0; i < units.size(); ++i) {
      if (units[i].flops < 0) {
        return invalid_argument(
            "partition_method 'compute' needs each unit's FLOPs, which are known for the "
            "transformer families only; use 'parameters', 'uniform' or 'type:<regex>'");
      }
      weights[i] = static_cast<int64_t>(std::llround(units[i].flops / 1e3));  // kFLOP: exact sums
    }
    return weights;
  }
  // Case-insensitive search, as DeepSpeed compiles the regex with IGNORECASE and calls search().
  ZT_ASSIGN_OR_RETURN(auto regex,
                      text::Regex::compile("(?i)" + method.type_regex, "partition_method type:"));
  bool any = false;
  for (size_t i = 0; i < units.size(); ++i) {
    bool found = false;
    ZT_RETURN_IF_ERROR(
        regex->for_each_match(units[i].type_name, [&](size_t, size_t) { found = true; }));
    weights[i] = found ? 1 : 0;
    any = any || found;
  }
  if (!any) {
    return invalid_argument(
        "partition_method 'type:{}' matches no unit; the model's unit types are {}",
        method.type_regex, distinct_types(units));
  }
  return weights;
}

Result<std::vector<int>> partition_units(std::span<const UnitInfo> units, int num_stages,
                                         std::string_view method) {
  if (num_stages < 1)
    return invalid_argument("--pipeline-parallel-size must be at least 1 (got {})", num_stages);
  ZT_ASSIGN_OR_RETURN(const PartitionMethod parsed, parse_partition_method(method));
  const int num_units = static_cast<int>(units.size());
  if (num_units < num_stages) {
    return invalid_argument(
        "--pipeline-parallel-size {} is more stages than the model's {} units; every stage needs "
        "at least one "
        "unit: use at most {} stages",
        num_stages, num_units, num_units);
  }
  if (parsed.kind == PartitionKind::kUniform) return partition_uniform(num_units, num_stages);
  ZT_ASSIGN_OR_RETURN(const std::vector<int64_t> weights, partition_weights(units, parsed));
  return partition_balanced(weights, num_stages);
}

int stage_of_unit(std::span<const int> parts, int unit) {
  ZT_ASSERT(parts.size() >= 2 && unit >= parts.front() && unit < parts.back(),
            "unit {} outside the partition", unit);
  // The last stage starting at or before `unit`; an empty stage [u, u) is skipped over.
  const auto it = std::upper_bound(parts.begin(), parts.end(), unit);
  return static_cast<int>(it - parts.begin()) - 1;
}

}  // namespace zt::pipe
