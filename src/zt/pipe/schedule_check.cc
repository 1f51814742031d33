// The schedule checker (schedule_check.h): a simulation of every stage's stream with blocking
// point-to-point operations and a model of each stage's buffers.
#include "zt/pipe/schedule_check.h"

#include <algorithm>

#include <fmt/format.h>

namespace zt::pipe {
namespace {

// What one pipeline buffer of a stage holds. A buffer is taken by a load or a receive and is
// free again once the stage is done with its micro-batch: in training after the backward and
// the gradient sent back (the first stage sends none); in inference after the forward and the
// output sent on (the last stage sends none).
struct Buffer {
  int input = -1;   // the micro-batch whose input (activation or loaded data) it holds
  int labels = -1;  // the micro-batch whose labels it holds (last stage)
  bool forwarded = false, output_sent = false, grad_received = false, backwarded = false,
       grad_sent = false;
  bool empty() const { return input < 0 && labels < 0; }
};

struct StageState {
  const Schedule* schedule = nullptr;
  std::vector<Buffer> buffers;
  size_t step = 0, index = 0;  // the next instruction; step == steps.size() when finished
  int loaded = 0;              // micro-batches the stage's data iterator handed out
  int forwards = 0, backwards = 0;
  bool tied_reduced = false, reduced = false, stepped = false;
  StageReport report;
};

class Simulator {
 public:
  Simulator(std::span<const Schedule> schedules, CheckOptions options) : options_(options) {
    for (const Schedule& s : schedules) {
      StageState st;
      st.schedule = &s;
      st.buffers.resize(static_cast<size_t>(std::max(s.num_pipe_buffers, 0)));
      stages_.push_back(std::move(st));
    }
    for (size_t s = 0; s < stages_.size(); ++s) skip_empty(static_cast<int>(s));
  }

  Result<PipelineReport> run();

 private:
  StageState& at(int s) { return stages_[static_cast<size_t>(s)]; }
  const StageState& at(int s) const { return stages_[static_cast<size_t>(s)]; }
  int num_stages() const { return static_cast<int>(stages_.size()); }
  bool training() const { return stages_.front().schedule->kind == ScheduleKind::kTrain; }
  int micro_batches() const { return stages_.front().schedule->micro_batches; }
  bool is_first(int s) const { return s == 0; }
  bool is_last(int s) const { return s == num_stages() - 1; }

  const Instruction* current(int s) const {
    const StageState& st = at(s);
    if (st.step >= st.schedule->steps.size()) return nullptr;
    return &st.schedule->steps[st.step][st.index];
  }
  void skip_empty(int s) {
    StageState& st = at(s);
    while (st.step < st.schedule->steps.size() && st.index >= st.schedule->steps[st.step].size()) {
      ++st.step;
      st.index = 0;
    }
  }
  void advance(int s) {
    ++at(s).index;
    skip_empty(s);
  }
  // Under a barrier, step t starts only once every stage finished step t - 1.
  bool may_run(int s) const {
    if (options_.barrier == StepBarrier::kNone) return true;
    return std::all_of(stages_.begin(), stages_.end(),
                       [&](const StageState& o) { return o.step >= at(s).step; });
  }
  bool waiting_at(int s, Op op) const {
    const Instruction* in = current(s);
    return in != nullptr && in->op == op && may_run(s);
  }

  std::string where(int s) const {
    const Instruction* in = current(s);
    return fmt::format("stage {}, step {}, {}", s, at(s).step,
                       in ? to_string(*in) : std::string("end"));
  }
  Status fail(int s, std::string_view what) const {
    return invalid_argument("pipeline schedule: {}: {}", where(s), what);
  }
  bool finished(int s, const Buffer& b) const {
    if (training()) return b.backwarded && (is_first(s) || b.grad_sent);
    return b.forwarded && (is_last(s) || b.output_sent);
  }
  Result<Buffer*> buffer(int s, const Instruction& in) {
    if (in.buffer_id < 0 || in.buffer_id >= static_cast<int>(at(s).buffers.size())) {
      return fail(s, fmt::format("buffer id outside [0, {})", at(s).buffers.size()));
    }
    return &at(s).buffers[static_cast<size_t>(in.buffer_id)];
  }
  Status check_label(int s, const Instruction& in, int micro_batch) const {
    if (in.micro_batch == micro_batch) return Status::ok();
    return fail(s, fmt::format("names micro-batch {} but moves micro-batch {}", in.micro_batch,
                               micro_batch));
  }
  std::string holding(const Buffer& b) const {
    return fmt::format("micro-batch {} (forward {}, backward {})", std::max(b.input, b.labels),
                       b.forwarded ? "done" : "pending", b.backwarded ? "done" : "pending");
  }

  Status take_input(int s, Buffer& b, int micro_batch);
  Status take_labels(int s, Buffer& b, int micro_batch);
  Status run_local(int s, const Instruction& in);
  Status send_activation(int from);
  Status send_grad(int from);
  Status reduce_tied();
  void account(int s);
  Status check_end() const;

  CheckOptions options_;
  std::vector<StageState> stages_;
};

Status Simulator::take_input(int s, Buffer& b, int micro_batch) {
  if (b.empty() || finished(s, b)) {
    b = Buffer{.input = micro_batch};
    return Status::ok();
  }
  // The last stage of an inference schedule loads labels before the activation arrives.
  if (b.input < 0 && b.labels == micro_batch) {
    b.input = micro_batch;
    return Status::ok();
  }
  return fail(s, fmt::format("overwrites buffer {}, which still holds {}", current(s)->buffer_id,
                             holding(b)));
}

Status Simulator::take_labels(int s, Buffer& b, int micro_batch) {
  if (b.empty() || finished(s, b)) {
    b = Buffer{.labels = micro_batch};
    return Status::ok();
  }
  if (b.labels < 0 && b.input == micro_batch && !b.forwarded) {
    b.labels = micro_batch;
    return Status::ok();
  }
  return fail(s, fmt::format("loads the labels of micro-batch {} into buffer {}, which holds {}",
                             micro_batch, current(s)->buffer_id, holding(b)));
}

Status Simulator::run_local(int s, const Instruction& in) {
  StageState& st = at(s);
  if (st.stepped) return fail(s, "comes after OptimizerStep");
  if (!training() &&
      (in.op == Op::kBackwardPass || in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep)) {
    return fail(s, "an inference schedule computes no gradients");
  }
  switch (in.op) {
    case Op::kLoadMicroBatch: {
      if (!is_first(s) && !is_last(s))
        return fail(s, "only the first and the last stage load micro-batches");
      ZT_ASSIGN_OR_RETURN(Buffer * b, buffer(s, in));
      const int mb = st.loaded++;
      if (mb >= micro_batches()) return fail(s, "loads more micro-batches than the batch has");
      ZT_RETURN_IF_ERROR(check_label(s, in, mb));
      if (is_first(s)) ZT_RETURN_IF_ERROR(take_input(s, *b, mb));
      if (is_last(s)) ZT_RETURN_IF_ERROR(take_labels(s, *b, mb));
      return Status::ok();
    }
    case Op::kForwardPass: {
      ZT_ASSIGN_OR_RETURN(Buffer * b, buffer(s, in));
      if (b->input < 0 || b->forwarded)
        return fail(s, "the buffer holds no input waiting for a forward");
      if (is_last(s) && b->labels != b->input) {
        return fail(
            s, fmt::format("the activations of micro-batch {} meet the labels of micro-batch {}",
                           b->input, b->labels));
      }
      if (b->input != st.forwards) {
        return fail(s, fmt::format("forwards micro-batch {} where micro-batch {} is next", b->input,
                                   st.forwards));
      }
      ZT_RETURN_IF_ERROR(check_label(s, in, b->input));
      b->forwarded = true;
      ++st.forwards;
      return Status::ok();
    }
    case Op::kBackwardPass: {
      ZT_ASSIGN_OR_RETURN(Buffer * b, buffer(s, in));
      if (!b->forwarded || b->backwarded)
        return fail(s, "the buffer holds no forward waiting for a backward");
      if (!is_last(s) && !b->grad_received) {
        return fail(s,
                    fmt::format("runs the backward of micro-batch {} before its gradient arrived",
                                b->input));
      }
      if (b->input != st.backwards) {
        return fail(s, fmt::format("backwards micro-batch {} where micro-batch {} is next",
                                   b->input, st.backwards));
      }
      ZT_RETURN_IF_ERROR(check_label(s, in, b->input));
      b->backwarded = true;
      ++st.backwards;
      return Status::ok();
    }
    case Op::kReduceGrads:
      if (!st.tied_reduced || st.reduced)
        return fail(s, "ReduceGrads must come once, after ReduceTiedGrads");
      st.reduced = true;
      return Status::ok();
    case Op::kOptimizerStep:
      if (!st.reduced) return fail(s, "OptimizerStep must come after ReduceGrads");
      st.stepped = true;
      return Status::ok();
    default:
      return fail(s, "is not a local instruction");  // the exchanges are run in pairs
  }
}

// `from`'s SendActivation meets `from + 1`'s RecvActivation (the caller checked both wait).
Status Simulator::send_activation(int from) {
  const int to = from + 1;
  const Instruction& send = *current(from);
  const Instruction& recv = *current(to);
  ZT_ASSIGN_OR_RETURN(Buffer * out, buffer(from, send));
  if (!out->forwarded || out->output_sent)
    return fail(from, "the buffer holds no output waiting to be sent");
  const int mb = out->input;
  ZT_RETURN_IF_ERROR(check_label(from, send, mb));
  ZT_ASSIGN_OR_RETURN(Buffer * in, buffer(to, recv));
  ZT_RETURN_IF_ERROR(check_label(to, recv, mb));
  ZT_RETURN_IF_ERROR(take_input(to, *in, mb));
  out->output_sent = true;
  return Status::ok();
}

// `from`'s SendGrad meets `from - 1`'s RecvGrad.
Status Simulator::send_grad(int from) {
  const int to = from - 1;
  const Instruction& send = *current(from);
  const Instruction& recv = *current(to);
  ZT_ASSIGN_OR_RETURN(Buffer * src, buffer(from, send));
  if (!src->backwarded || src->grad_sent)
    return fail(from, "the buffer holds no input gradient waiting to be sent");
  const int mb = src->input;
  ZT_RETURN_IF_ERROR(check_label(from, send, mb));
  ZT_ASSIGN_OR_RETURN(Buffer * dst, buffer(to, recv));
  ZT_RETURN_IF_ERROR(check_label(to, recv, mb));
  if (dst->input != mb || !dst->forwarded || !dst->output_sent || dst->grad_received ||
      dst->backwarded) {
    return fail(to, fmt::format("receives the gradient of micro-batch {} into a buffer holding {}",
                                mb, holding(*dst)));
  }
  dst->grad_received = true;
  src->grad_sent = true;
  return Status::ok();
}

Status Simulator::reduce_tied() {
  for (int s = 0; s < num_stages(); ++s) {
    StageState& st = at(s);
    if (!training()) return fail(s, "an inference schedule computes no gradients");
    if (st.stepped || st.tied_reduced)
      return fail(s, "ReduceTiedGrads must come once, before OptimizerStep");
    if (st.backwards != micro_batches()) {
      return fail(s, fmt::format("reduces gradients after {} of {} backwards", st.backwards,
                                 micro_batches()));
    }
    st.tied_reduced = true;
  }
  return Status::ok();
}

void Simulator::account(int s) {
  StageState& st = at(s);
  int stored = 0, in_use = 0;
  for (const Buffer& b : st.buffers) {
    if (training() && b.forwarded && !b.backwarded) ++stored;
    if (!b.empty() && !finished(s, b)) ++in_use;
  }
  st.report.peak_stored_activations = std::max(st.report.peak_stored_activations, stored);
  st.report.peak_buffers_in_use = std::max(st.report.peak_buffers_in_use, in_use);
}

Status Simulator::check_end() const {
  for (int s = 0; s < num_stages(); ++s) {
    const StageState& st = at(s);
    const int m = micro_batches();
    if (st.forwards != m)
      return fail(s, fmt::format("the stage ran {} of {} forwards", st.forwards, m));
    if ((is_first(s) || is_last(s)) && st.loaded != m) {
      return fail(s, fmt::format("the stage loaded {} of {} micro-batches", st.loaded, m));
    }
    if (training()) {
      if (st.backwards != m)
        return fail(s, fmt::format("the stage ran {} of {} backwards", st.backwards, m));
      if (!st.stepped)
        return fail(s, "the batch ended without ReduceTiedGrads, ReduceGrads, OptimizerStep");
    }
    for (const Buffer& b : st.buffers) {
      if (!b.empty() && !finished(s, b))
        return fail(s, fmt::format("the batch ended with {} unfinished", holding(b)));
    }
  }
  return Status::ok();
}

Result<PipelineReport> Simulator::run() {
  for (;;) {
    bool progress = false;
    for (int s = 0; s < num_stages(); ++s) {
      while (const Instruction* in = current(s)) {
        if (!may_run(s)) break;
        const Op op = in->op;
        const bool sends_down = op == Op::kSendActivation || op == Op::kRecvGrad;
        const bool sends_up = op == Op::kRecvActivation || op == Op::kSendGrad;
        if ((sends_down && is_last(s)) || (sends_up && is_first(s))) {
          return fail(s, "there is no stage on that side to exchange with");
        }
        if (op == Op::kSendActivation || op == Op::kRecvActivation) {
          const int from = op == Op::kSendActivation ? s : s - 1;
          if (!waiting_at(from, Op::kSendActivation) || !waiting_at(from + 1, Op::kRecvActivation))
            break;
          ZT_RETURN_IF_ERROR(send_activation(from));
          advance(from);
          advance(from + 1);
          account(from);
          account(from + 1);
        } else if (op == Op::kSendGrad || op == Op::kRecvGrad) {
          const int from = op == Op::kSendGrad ? s : s + 1;
          if (!waiting_at(from, Op::kSendGrad) || !waiting_at(from - 1, Op::kRecvGrad)) break;
          ZT_RETURN_IF_ERROR(send_grad(from));
          advance(from);
          advance(from - 1);
          account(from);
          account(from - 1);
        } else if (op == Op::kReduceTiedGrads) {
          bool all_waiting = true;
          for (int o = 0; o < num_stages(); ++o)
            all_waiting = all_waiting && waiting_at(o, Op::kReduceTiedGrads);
          if (!all_waiting) break;
          ZT_RETURN_IF_ERROR(reduce_tied());
          for (int o = 0; o < num_stages(); ++o) advance(o);
        } else {
          ZT_RETURN_IF_ERROR(run_local(s, *in));
          advance(s);
          account(s);
        }
        progress = true;
      }
    }
    if (std::all_of(stages_.begin(), stages_.end(),
                    [](const StageState& st) { return st.step >= st.schedule->steps.size(); })) {
      break;
    }
    if (!progress) {
      std::string waits;
      for (int s = 0; s < num_stages(); ++s) {
        if (current(s) != nullptr)
          waits += fmt::format("{}{}", waits.empty() ? "" : "; ", where(s));
      }
      return invalid_argument("pipeline schedule deadlocks: every unfinished stage waits ({})",
                              waits);
    }
  }
  ZT_RETURN_IF_ERROR(check_end());
  PipelineReport report;
  for (const StageState& st : stages_) report.stages.push_back(st.report);
  return report;
}

}  // namespace

Result<PipelineReport> check_pipeline(std::span<const Schedule> schedules, CheckOptions options) {
  if (schedules.empty()) return invalid_argument("pipeline schedule check: no stages given");
  const Schedule& first = schedules.front();
  for (size_t s = 0; s < schedules.size(); ++s) {
    const Schedule& sc = schedules[s];
    if (sc.stage_id != static_cast<int>(s) || sc.stages != static_cast<int>(schedules.size()) ||
        sc.micro_batches != first.micro_batches || sc.kind != first.kind || sc.micro_batches < 1) {
      return invalid_argument(
          "pipeline schedule check: schedule {} is for stage {} of {} with {} micro-batches; give "
          "one schedule "
          "per stage, in stage order, all of one kind and batch",
          s, sc.stage_id, sc.stages, sc.micro_batches);
    }
  }
  return Simulator(schedules, options).run();
}

}  // namespace zt::pipe
