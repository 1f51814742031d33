// Pipeline partitioning: which consecutive units (DeepSpeed's "layers") each stage owns, as
// DeepSpeed's PipelineModule._partition_layers decides it. A partition is a list parts[0..P] of
// P + 1 unit indices: stage s owns units [parts[s], parts[s + 1]).
//
// partition_method, as DeepSpeed parses it (lowercased first, so "Type:Block" works):
//   "uniform"      the same number of units per stage (partition_uniform);
//   "parameters"   (the default) balanced on each unit's trainable parameter count;
//   "type:<regex>" balanced on weight 1 for each unit whose type name the regex finds
//                  (searched, not anchored; case-insensitive), 0 for the others;
//   "compute"      (ZeroTrain's own, not DeepSpeed's) balanced on each unit's forward FLOPs
//                  (UnitInfo::flops, which the caller estimates: the flops profiler's count
//                  for transformers), so a stage whose head multiplies by a large vocabulary
//                  gets fewer blocks: what the bubble measures (docs/performance.md).
// Balancing is DeepSpeed's partition_balanced: a dynamic programme over (units, stages) that
// keeps, per state, the split minimising max - min of the stage weights, later splits winning
// ties. It is a heuristic: on rare inputs another partition has a smaller max - min, and we
// return DeepSpeed's answer, so a model splits into the same stages as under DeepSpeed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::nn {
class Model;
}

namespace zt::pipe {

// What partitioning needs to know of a unit.
struct UnitInfo {
  std::string type_name;         // the class name ("TransformerBlock"), what type:<regex> matches
  int64_t trainable_params = 0;  // parameter elements, 0 for a frozen unit
  double flops = -1;             // forward FLOPs of a micro-batch ("compute"); < 0: unknown
};

// Every unit of `model` in order: its C++ class name without namespaces (the counterpart of a
// torch module's class name) and its parameter count (0 when frozen, as DeepSpeed counts only
// parameters with requires_grad). Passive units (LoRA adapters, appended after the head) are
// listed too: whoever places stages must keep each with the unit that reads it.
std::vector<UnitInfo> describe_units(const nn::Model& model);

enum class PartitionKind : unsigned char { kUniform, kParameters, kType, kCompute };

struct PartitionMethod {
  PartitionKind kind = PartitionKind::kParameters;
  std::string type_regex{};  // kType only, lowercased as DeepSpeed leaves it
};

inline constexpr std::string_view kDefaultPartitionMethod = "parameters";

// Errors: a method other than the three (DeepSpeed's "profile" included, which it does not
// implement either).
Result<PartitionMethod> parse_partition_method(std::string_view method);

// DeepSpeed's partition_uniform: with more items than parts, each part gets items / parts and
// the first items % parts parts one more; otherwise parts[p] = min(p, items).
std::vector<int> partition_uniform(int num_items, int num_parts);
// DeepSpeed's partition_balanced over non-negative weights (see the file comment); with no more
// weights than parts it is partition_uniform. Sums are exact in int64 (DeepSpeed's float64
// sums are exact below 2^53 parameters, so the two agree).
std::vector<int> partition_balanced(std::span<const int64_t> weights, int num_parts);

// The weights partition_balanced runs on for a "parameters" or "type:" method (the counts, or
// the 0/1 matches). Errors: a regex that does not compile, a regex no unit's type matches.
Result<std::vector<int64_t>> partition_weights(std::span<const UnitInfo> units,
                                               const PartitionMethod& method);

// The stage boundaries of `units` over `num_stages` stages. Errors: fewer units than stages (a
// stage with no unit: DeepSpeed lets it run empty, which leaves a GPU idle and breaks the
// engine's assumption that every stage computes), no stages, the method's errors above.
Result<std::vector<int>> partition_units(std::span<const UnitInfo> units, int num_stages,
                                         std::string_view method = kDefaultPartitionMethod);

// The stage that owns unit `unit` under `parts`.
int stage_of_unit(std::span<const int> parts, int unit);

}  // namespace zt::pipe
