// Pipeline schedules: the instruction stream one stage runs for one batch of micro-batches, as
// DeepSpeed's deepspeed/runtime/pipe/schedule.py generates it, instruction for instruction.
//
// A schedule is a list of steps, each a list of instructions. Steps are atomic: a barrier
// between two steps of all stages cannot deadlock, because every send of a step meets its
// receive in the same step of the neighbouring stage (schedule_check.h verifies this).
//
// TrainSchedule (1F1B, synchronous): 2 * (M + S - 1) steps for M micro-batches on S stages.
// Stage s runs the forward of micro-batch m at step 2m + s and its backward at step
// 2m + 2S - 1 - s, so a stage alternates forward and backward once the pipeline is full and
// holds the activations of at most min(S - s, M) micro-batches: memory grows with the number
// of stages, not with gradient accumulation. Buffers are reused cyclically (micro-batch m uses
// buffer m % num_pipe_buffers, num_pipe_buffers = max(2, min(S - s, M))). The first and the last
// stage load micro-batches (inputs on the first, labels on the last). The final step ends with
// ReduceTiedGrads, ReduceGrads, OptimizerStep.
//
// InferenceSchedule: M + S - 1 steps, forward only, two buffers alternating between receiving
// and sending.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::pipe {

// The instruction set, declared once: X(name, takes a buffer id).
#define ZT_PIPE_INSTRUCTIONS(X) \
  X(LoadMicroBatch, true)       \
  X(ForwardPass, true)          \
  X(BackwardPass, true)         \
  X(SendActivation, true)       \
  X(RecvActivation, true)       \
  X(SendGrad, true)             \
  X(RecvGrad, true)             \
  X(ReduceTiedGrads, false)     \
  X(ReduceGrads, false)         \
  X(OptimizerStep, false)

enum class Op : unsigned char {
#define ZT_PIPE_ENUM(name, buffered) k##name,
  ZT_PIPE_INSTRUCTIONS(ZT_PIPE_ENUM)
#undef ZT_PIPE_ENUM
};

std::string_view op_name(Op op);  // "ForwardPass"
bool op_takes_buffer(Op op);

struct Instruction {
  Op op = Op::kForwardPass;
  int buffer_id = -1;  // the pipeline buffer it reads or fills; -1 for the reductions and the step
  // The micro-batch the instruction loads, computes or moves (0-based within the batch); -1 for
  // the reductions and the step. DeepSpeed's instructions carry only the buffer; the engine's
  // logs and the schedule checker use this.
  int micro_batch = -1;
  bool operator==(const Instruction&) const = default;
};
// DeepSpeed's repr: "ForwardPass(buffer_id=1)", "OptimizerStep()".
std::string to_string(const Instruction& instruction);

using Step = std::vector<Instruction>;

enum class ScheduleKind : unsigned char { kTrain, kInference };

struct Schedule {
  ScheduleKind kind = ScheduleKind::kTrain;
  int micro_batches = 1;
  int stages = 1;
  int stage_id = 0;
  int num_pipe_buffers = 2;  // buffer ids run over [0, num_pipe_buffers)
  std::vector<Step> steps{};
};

// max(2, min(stages - stage_id, micro_batches)): the micro-batches in flight on a stage.
int train_num_pipe_buffers(int micro_batches, int stages, int stage_id);

// Errors: fewer than 1 micro-batch or stage, a stage id outside [0, stages).
Result<Schedule> train_schedule(int micro_batches, int stages, int stage_id);
Result<Schedule> inference_schedule(int micro_batches, int stages, int stage_id);

}  // namespace zt::pipe
