// Pipeline schedules (schedule.h): DeepSpeed's TrainSchedule and InferenceSchedule.
#include "zt/pipe/schedule.h"

#include <algorithm>

#include <fmt/format.h>

namespace zt::pipe {
namespace {

struct OpInfo {
  std::string_view name;
  bool takes_buffer;
};
constexpr OpInfo kOps[] = {
#define ZT_PIPE_INFO(name, buffered) {#name, buffered},
    ZT_PIPE_INSTRUCTIONS(ZT_PIPE_INFO)
#undef ZT_PIPE_INFO
};

bool is_even(int x) {
  return x % 2 == 0;
}

Status check_shape(int micro_batches, int stages, int stage_id) {
  if (micro_batches < 1) {
    return invalid_argument(
        "a pipeline batch needs at least 1 micro-batch (gradient_accumulation_steps is {}); set "
        "gradient_accumulation_steps to 1 or more",
        micro_batches);
  }
  if (stages < 1)
    return invalid_argument("--pipeline-parallel-size must be at least 1 (got {})", stages);
  if (stage_id < 0 || stage_id >= stages) {
    return invalid_argument("pipeline stage {} is outside a pipeline of {} stages", stage_id,
                            stages);
  }
  return Status::ok();
}

Instruction buffered(Op op, int buffer_id, int micro_batch) {
  return {.op = op, .buffer_id = buffer_id, .micro_batch = micro_batch};
}

// The 1F1B mapping of a step to (micro-batch, forward?), case by case as DeepSpeed writes it:
// even stages run forwards on even steps, odd stages on odd steps. Micro-batch ids outside
// [0, M) mean the stage idles in that half of the step (fill and drain).
struct StepWork {
  int micro_batch;
  bool forward;
};
StepWork train_step_work(int step, int stages, int stage_id) {
  if (is_even(step) && is_even(stage_id)) return {step / 2 - stage_id / 2, true};
  if (!is_even(step) && !is_even(stage_id)) return {(step - 1) / 2 - stage_id / 2, true};
  if (is_even(step) && !is_even(stage_id)) return {step / 2 - stages + (stage_id + 1) / 2, false};
  return {(step - 1) / 2 - stages + 1 + stage_id / 2, false};
}

}  // namespace

std::string_view op_name(Op op) {
  return kOps[static_cast<size_t>(op)].name;
}
bool op_takes_buffer(Op op) {
  return kOps[static_cast<size_t>(op)].takes_buffer;
}

std::string to_string(const Instruction& instruction) {
  if (!op_takes_buffer(instruction.op)) return fmt::format("{}()", op_name(instruction.op));
  return fmt::format("{}(buffer_id={})", op_name(instruction.op), instruction.buffer_id);
}

int train_num_pipe_buffers(int micro_batches, int stages, int stage_id) {
  return std::max(2, std::min(stages - stage_id, micro_batches));
}

Result<Schedule> train_schedule(int micro_batches, int stages, int stage_id) {
  ZT_RETURN_IF_ERROR(check_shape(micro_batches, stages, stage_id));
  Schedule s{.kind = ScheduleKind::kTrain,
             .micro_batches = micro_batches,
             .stages = stages,
             .stage_id = stage_id,
             .num_pipe_buffers = train_num_pipe_buffers(micro_batches, stages, stage_id)};
  const auto valid = [&](int mb) { return mb >= 0 && mb < micro_batches; };
  const auto buffer = [&](int mb) { return mb % s.num_pipe_buffers; };
  const bool has_prev_stage = stage_id > 0;
  const bool has_next_stage = stage_id < stages - 1;
  const int total_steps = 2 * (micro_batches + stages - 1);
  int prev_mb = -1;  // the micro-batch of the previous step's work (its output is sent now)
  for (int step = 0; step < total_steps; ++step) {
    const auto [mb, forward] = train_step_work(step, stages, stage_id);
    Step cmds;
    // Exchange first: a forward step returns the gradient of the backward just done and takes
    // the next activation; a backward step takes its gradient and passes on the activation of
    // the forward just done. Receive-before-send on one side and send-before-receive on the
    // other pair up without deadlock.
    if (forward) {
      if (valid(prev_mb) && has_prev_stage)
        cmds.push_back(buffered(Op::kSendGrad, buffer(prev_mb), prev_mb));
      if (valid(mb) && has_prev_stage)
        cmds.push_back(buffered(Op::kRecvActivation, buffer(mb), mb));
    } else {
      if (valid(mb) && has_next_stage) cmds.push_back(buffered(Op::kRecvGrad, buffer(mb), mb));
      if (valid(prev_mb) && has_next_stage)
        cmds.push_back(buffered(Op::kSendActivation, buffer(prev_mb), prev_mb));
    }
    if ((stage_id == 0 || stage_id == stages - 1) && forward && valid(mb)) {
      cmds.push_back(buffered(Op::kLoadMicroBatch, buffer(mb), mb));
    }
    if (valid(mb))
      cmds.push_back(buffered(forward ? Op::kForwardPass : Op::kBackwardPass, buffer(mb), mb));
    if (step == total_steps - 1) {
      cmds.push_back({.op = Op::kReduceTiedGrads});
      cmds.push_back({.op = Op::kReduceGrads});
      cmds.push_back({.op = Op::kOptimizerStep});
    }
    prev_mb = mb;
    s.steps.push_back(std::move(cmds));
  }
  return s;
}

Result<Schedule> inference_schedule(int micro_batches, int stages, int stage_id) {
  ZT_RETURN_IF_ERROR(check_shape(micro_batches, stages, stage_id));
  Schedule s{.kind = ScheduleKind::kInference,
             .micro_batches = micro_batches,
             .stages = stages,
             .stage_id = stage_id,
             .num_pipe_buffers = 2};
  const auto valid = [&](int mb) { return mb >= 0 && mb < micro_batches; };
  const bool has_prev_stage = stage_id > 0;
  const bool has_next_stage = stage_id < stages - 1;
  const int total_steps = micro_batches + stages - 1;
  for (int step = 0; step < total_steps; ++step) {
    const int mb = step - stage_id;
    // Two buffers alternate: one receives this step's input while the other sends the output
    // of the previous step. Even stages send first and odd stages receive first, so
    // neighbours always meet.
    const int recv_buf = is_even(stage_id) ? step % 2 : (step + 1) % 2;
    const int send_buf = is_even(stage_id) ? (step + 1) % 2 : step % 2;
    Step cmds;
    if ((stage_id == 0 || stage_id == stages - 1) && valid(mb)) {
      cmds.push_back(buffered(Op::kLoadMicroBatch, recv_buf, mb));
    }
    const bool send = has_next_stage && valid(mb - 1);
    const bool recv = has_prev_stage && valid(mb);
    if (is_even(stage_id)) {
      if (send) cmds.push_back(buffered(Op::kSendActivation, send_buf, mb - 1));
      if (recv) cmds.push_back(buffered(Op::kRecvActivation, recv_buf, mb));
    } else {
      if (recv) cmds.push_back(buffered(Op::kRecvActivation, recv_buf, mb));
      if (send) cmds.push_back(buffered(Op::kSendActivation, send_buf, mb - 1));
    }
    if (valid(mb)) cmds.push_back(buffered(Op::kForwardPass, recv_buf, mb));
    s.steps.push_back(std::move(cmds));
  }
  return s;
}

}  // namespace zt::pipe
