// The schedule checker: runs the instruction streams of every stage of one pipeline together,
// as the stages' processes would, and proves a schedule safe before the engine runs it.
//
// Model of execution:
// - Point-to-point operations block until the peer reaches the matching one (rendezvous, the
//   strictest semantics: a schedule that completes here also completes when sends are buffered,
//   as NCCL may do with small messages). SendActivation on stage s meets RecvActivation on
//   s + 1; SendGrad on s meets RecvGrad on s - 1.
// - ReduceTiedGrads is a collective of every stage (tied modules may live on any of them).
// - Everything else is local to a stage.
// - With StepBarrier::kBetweenSteps, no stage starts step t before every stage finished step
//   t - 1: DeepSpeed's claim that its steps are atomic.
//
// What it verifies beyond the absence of deadlock: the data flows correctly. The first stage
// loads micro-batches 0, 1, 2, ... in order, the last stage loads their labels; each stage
// forwards (and, training, backwards) every micro-batch exactly once and in order; a received
// activation or gradient is the one of the micro-batch the buffer holds; no buffer is refilled
// while it holds activations a backward still needs (or an output not yet sent); the last
// stage's labels and activations in a buffer belong to the same micro-batch; the reductions
// and the optimizer step come once, after the last backward, in that order; buffer ids stay in
// [0, num_pipe_buffers); every instruction's micro_batch field names the micro-batch it moves.
#pragma once

#include <span>
#include <vector>

#include "zt/core/status.h"
#include "zt/pipe/schedule.h"

namespace zt::pipe {

enum class StepBarrier : unsigned char { kNone, kBetweenSteps };

struct CheckOptions {
  StepBarrier barrier = StepBarrier::kNone;
};

struct StageReport {
  // The most micro-batches whose forward had run and whose backward had not, at any moment:
  // the activations the stage stores (training; 0 for inference).
  int peak_stored_activations = 0;
  // The most buffers holding a micro-batch the stage still needs (received or loaded, not yet
  // finished with), at any moment.
  int peak_buffers_in_use = 0;
};

struct PipelineReport {
  std::vector<StageReport> stages;
};

// `schedules` holds one schedule per stage, in stage order, all of one kind and shape. The
// first violation comes back as an error naming the stage, step and instruction; a deadlock
// names where every unfinished stage waits.
Result<PipelineReport> check_pipeline(std::span<const Schedule> schedules,
                                      CheckOptions options = {});

}  // namespace zt::pipe
