// The state of an engine's CUDA-graph step (EngineOptions::cuda_graph, runtime/engine_graph.cc):
// the page-locked staging buffers the host fills before each replay, the device buffers the
// graph reads and writes at fixed addresses, and the graph. Internal to the engine's sources.
#pragma once

#include <memory>

#include "zt/core/device.h"
#include "zt/core/tensor.h"
#include "zt/runtime/engine.h"

namespace zt {

struct Engine::GraphState {
  Shape shape;          // the micro-batch shape the buffers (and the graph) are for
  int64_t counted = 0;  // the counted targets the graph's loss gradient was captured with
  // Page-locked: the micro-batch, the Adam step's scalars, and what a step reads back. The
  // graph's first nodes copy the first three in and its last nodes copy the last two out.
  Tensor tokens_host, targets_host, scalars_host, losses_host, sumsq_host;
  Tensor tokens, targets, scalars;  // on the device, at fixed addresses
  std::unique_ptr<CapturedGraph> graph;
  int eager_steps = 0;  // steps run without the graph since the buffers were made
  int captures = 0;
  int64_t replays = 0;
  bool off = false;  // a capture failed, or the step changes too often: no graph from now on
};

}  // namespace zt
