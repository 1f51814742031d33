// pipe/schedule_check.h: DeepSpeed's schedules run to completion with every send meeting its
// receive (also with a barrier between steps, DeepSpeed's atomic-step claim), a stage stores
// the activations of min(S - stage, M) micro-batches at most (the pipeline depth, not the
// micro-batch count), and streams broken in the ways a schedule can be wrong are caught.
#include "zt/pipe/schedule_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace zt::pipe {
namespace {

std::vector<Schedule> all_stages(ScheduleKind kind, int M, int S) {
  std::vector<Schedule> out;
  for (int s = 0; s < S; ++s) {
    auto sc = kind == ScheduleKind::kTrain ? train_schedule(M, S, s) : inference_schedule(M, S, s);
    EXPECT_TRUE(sc.is_ok());
    out.push_back(*sc);
  }
  return out;
}

std::string check_error(const std::vector<Schedule>& schedules, CheckOptions options = {}) {
  auto r = check_pipeline(schedules, options);
  return r.is_ok() ? std::string() : r.status().message();
}

// The instruction `op` of `stage` at `step` (the first of its kind there).
Instruction& find(std::vector<Schedule>& s, int stage, int step, Op op) {
  Step& st = s[static_cast<size_t>(stage)].steps[static_cast<size_t>(step)];
  auto it = std::find_if(st.begin(), st.end(), [&](const Instruction& i) { return i.op == op; });
  EXPECT_NE(it, st.end());
  return *it;
}

TEST(PipeScheduleCheck, TrainSchedulesCompleteAndStoreAtMostTheirDepth) {
  for (int S = 1; S <= 6; ++S) {
    for (int M = 1; M <= 10; ++M) {
      const std::vector<Schedule> schedules = all_stages(ScheduleKind::kTrain, M, S);
      for (StepBarrier barrier : {StepBarrier::kNone, StepBarrier::kBetweenSteps}) {
        auto r = check_pipeline(schedules, {.barrier = barrier});
        ASSERT_TRUE(r.is_ok()) << "S=" << S << " M=" << M << ": " << r.status().message();
        for (int s = 0; s < S; ++s) {
          const StageReport& st = r->stages[static_cast<size_t>(s)];
          EXPECT_EQ(st.peak_stored_activations, std::min(S - s, M))
              << "S=" << S << " M=" << M << " stage " << s;
          EXPECT_LE(st.peak_buffers_in_use, schedules[static_cast<size_t>(s)].num_pipe_buffers);
        }
      }
    }
  }
}

TEST(PipeScheduleCheck, PeakStoredActivationsIsTheStageCountNotTheMicroBatchCount) {
  // Four stages, eight micro-batches: the first stage holds 4 forwards, never 8.
  auto r = check_pipeline(all_stages(ScheduleKind::kTrain, 8, 4));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  std::vector<int> peaks;
  for (const StageReport& s : r->stages) peaks.push_back(s.peak_stored_activations);
  EXPECT_EQ(peaks, (std::vector<int>{4, 3, 2, 1}));
}

TEST(PipeScheduleCheck, InferenceSchedulesComplete) {
  for (int S = 1; S <= 6; ++S) {
    for (int M = 1; M <= 10; ++M) {
      for (StepBarrier barrier : {StepBarrier::kNone, StepBarrier::kBetweenSteps}) {
        auto r = check_pipeline(all_stages(ScheduleKind::kInference, M, S), {.barrier = barrier});
        ASSERT_TRUE(r.is_ok()) << "S=" << S << " M=" << M << ": " << r.status().message();
        for (const StageReport& st : r->stages) {
          EXPECT_EQ(st.peak_stored_activations, 0);
          EXPECT_LE(st.peak_buffers_in_use, 2);
        }
      }
    }
  }
}

TEST(PipeScheduleCheck, SendBeforeReceiveOnBothSidesDeadlocks) {
  // Stage 0, step 3 of (S 2, M 4) receives the gradient, then sends the activation, while
  // stage 1 sends the gradient, then receives. Swapping stage 0's pair makes both send first.
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  Step& step = s[0].steps[3];
  ASSERT_EQ(step[0].op, Op::kRecvGrad);
  ASSERT_EQ(step[1].op, Op::kSendActivation);
  std::swap(step[0], step[1]);
  const std::string e = check_error(s);
  EXPECT_NE(e.find("deadlocks"), std::string::npos) << e;
  EXPECT_NE(e.find("stage 0, step 3, SendActivation(buffer_id=1)"), std::string::npos) << e;
  EXPECT_NE(e.find("stage 1, step 3, SendGrad(buffer_id=0)"), std::string::npos) << e;
}

TEST(PipeScheduleCheck, AMissingSendDeadlocks) {
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  Step& step = s[0].steps[1];
  ASSERT_EQ(step.size(), 1u);
  step.clear();  // stage 1 waits forever for micro-batch 0
  EXPECT_NE(check_error(s).find("deadlocks"), std::string::npos);
}

TEST(PipeScheduleCheck, TooFewBuffersOverwriteStoredActivations) {
  // One buffer on stage 0 of (S 2, M 4): micro-batch 1 is loaded while micro-batch 0 still
  // waits for its backward.
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  s[0].num_pipe_buffers = 1;
  for (Step& step : s[0].steps) {
    for (Instruction& in : step) {
      if (in.buffer_id >= 0) in.buffer_id = 0;
    }
  }
  const std::string e = check_error(s);
  EXPECT_NE(e.find("stage 0, step 2, LoadMicroBatch(buffer_id=0): overwrites buffer 0, which still "
                   "holds micro-batch 0"),
            std::string::npos)
      << e;
}

TEST(PipeScheduleCheck, ABufferIdOutsideTheBuffersIsCaught) {
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  find(s, 1, 1, Op::kRecvActivation).buffer_id = 2;
  EXPECT_NE(check_error(s).find("buffer id outside [0, 2)"), std::string::npos) << check_error(s);
}

TEST(PipeScheduleCheck, LabelsOfAnotherMicroBatchAreCaught) {
  // The last stage loads the labels of micro-batch 1 into buffer 0 instead of 1: its forward
  // of micro-batch 1 then finds no labels beside the activations.
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  find(s, 1, 3, Op::kLoadMicroBatch).buffer_id = 0;
  const std::string e = check_error(s);
  EXPECT_NE(e.find("the activations of micro-batch 1 meet the labels of micro-batch -1"),
            std::string::npos)
      << e;
}

TEST(PipeScheduleCheck, BackwardBeforeItsGradientIsCaught) {
  // Stage 0 of (S 2, M 4), step 3: the backward moved ahead of the gradient's receive.
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  Step& step = s[0].steps[3];
  std::rotate(step.begin(), step.begin() + 2, step.end());  // Backward, RecvGrad, SendActivation
  const std::string e = check_error(s);
  EXPECT_NE(e.find("before its gradient arrived"), std::string::npos) << e;
}

TEST(PipeScheduleCheck, OptimizerStepMustEndTheBatchOnEveryStage) {
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  s[1].steps.back().pop_back();  // no OptimizerStep on stage 1
  EXPECT_NE(check_error(s).find("without ReduceTiedGrads, ReduceGrads, OptimizerStep"),
            std::string::npos);

  s = all_stages(ScheduleKind::kTrain, 4, 2);
  Step& last = s[0].steps.back();
  std::swap(last[last.size() - 1], last[last.size() - 2]);  // OptimizerStep before ReduceGrads
  EXPECT_NE(check_error(s).find("OptimizerStep must come after ReduceGrads"), std::string::npos);

  // ReduceTiedGrads is a collective of all stages: stage 1 reducing a step early while stage 0
  // still has a backward to run leaves stage 0 alone at its RecvGrad.
  s = all_stages(ScheduleKind::kTrain, 4, 2);
  Step& final1 = s[1].steps.back();
  Step& early1 = s[1].steps[s[1].steps.size() - 2];
  early1.insert(early1.begin(), final1.begin() + 1, final1.end());
  final1.resize(1);
  EXPECT_FALSE(check_error(s).empty());
}

TEST(PipeScheduleCheck, StepsThatOnlyMeetAcrossABarrierAreCaught) {
  // Stage 1 of (S 2, M 4) delayed by one step: without a barrier the sends still meet their
  // receives in order, with one stage 0 waits in step 1 for a receive stage 1 posts in step 2.
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  s[1].steps.insert(s[1].steps.begin(), Step{});
  EXPECT_TRUE(check_pipeline(s, {.barrier = StepBarrier::kNone}).is_ok()) << check_error(s);
  EXPECT_NE(check_error(s, {.barrier = StepBarrier::kBetweenSteps}).find("deadlocks"),
            std::string::npos);
}

TEST(PipeScheduleCheck, MislabelledMicroBatchIsCaught) {
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 2);
  find(s, 0, 2, Op::kForwardPass).micro_batch = 2;
  EXPECT_NE(check_error(s).find("names micro-batch 2 but moves micro-batch 1"), std::string::npos)
      << check_error(s);
}

TEST(PipeScheduleCheck, SchedulesMustFormOnePipeline) {
  std::vector<Schedule> s = all_stages(ScheduleKind::kTrain, 4, 3);
  std::swap(s[0], s[1]);
  EXPECT_FALSE(check_pipeline(s).is_ok());
  std::vector<Schedule> mixed = all_stages(ScheduleKind::kTrain, 4, 2);
  mixed[1] = all_stages(ScheduleKind::kTrain, 5, 2)[1];
  EXPECT_FALSE(check_pipeline(mixed).is_ok());
  EXPECT_FALSE(check_pipeline({}).is_ok());
}

}  // namespace
}  // namespace zt::pipe
