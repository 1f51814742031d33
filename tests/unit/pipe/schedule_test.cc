// pipe/schedule.h against DeepSpeed's rules. Small shapes are compared with instruction
// streams written out by hand from deepspeed/runtime/pipe/schedule.py (and checked against that
// code's output); every shape up to 6 stages and 10 micro-batches is compared with streams
// built from the 1F1B timing instead of the step-to-micro-batch mapping: stage s runs the
// forward of micro-batch m at step 2m + s and its backward at step 2m + 2S - 1 - s, sends an
// output or a gradient one step after computing it, receives in the step that uses it.
#include "zt/pipe/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace zt::pipe {

// Readable failures: gtest prints an Instruction as DeepSpeed's repr with its micro-batch.
void PrintTo(const Instruction& in, std::ostream* os) { *os << to_string(in) << "@mb" << in.micro_batch; }

namespace {

// One line per step: the instructions in DeepSpeed's repr, separated by spaces.
std::vector<std::string> render(const Schedule& s) {
  std::vector<std::string> lines;
  for (const Step& step : s.steps) {
    std::string line;
    for (const Instruction& in : step) {
      if (!line.empty()) line += ' ';
      line += to_string(in);
    }
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> train(int m, int stages, int stage) {
  auto s = train_schedule(m, stages, stage);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return render(*s);
}

std::vector<std::string> infer(int m, int stages, int stage) {
  auto s = inference_schedule(m, stages, stage);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return render(*s);
}

using Lines = std::vector<std::string>;

TEST(PipeSchedule, InstructionsPrintAsDeepSpeed) {
  EXPECT_EQ(to_string({.op = Op::kForwardPass, .buffer_id = 1, .micro_batch = 3}),
            "ForwardPass(buffer_id=1)");
  EXPECT_EQ(to_string({.op = Op::kOptimizerStep}), "OptimizerStep()");
  EXPECT_EQ(op_name(Op::kRecvGrad), "RecvGrad");
  EXPECT_TRUE(op_takes_buffer(Op::kLoadMicroBatch));
  EXPECT_FALSE(op_takes_buffer(Op::kReduceTiedGrads));
}

TEST(PipeSchedule, NumPipeBuffers) {
  // max(2, min(S - stage, M)).
  EXPECT_EQ(train_num_pipe_buffers(8, 4, 0), 4);
  EXPECT_EQ(train_num_pipe_buffers(8, 4, 1), 3);
  EXPECT_EQ(train_num_pipe_buffers(8, 4, 2), 2);
  EXPECT_EQ(train_num_pipe_buffers(8, 4, 3), 2);
  EXPECT_EQ(train_num_pipe_buffers(2, 3, 0), 2);
  EXPECT_EQ(train_num_pipe_buffers(3, 8, 0), 3);
  EXPECT_EQ(train_num_pipe_buffers(1, 1, 0), 2);
  auto s = train_schedule(8, 4, 1);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->num_pipe_buffers, 3);
  EXPECT_EQ(s->steps.size(), 22u);  // 2 (M + S - 1)
  auto i = inference_schedule(8, 4, 1);
  ASSERT_TRUE(i.is_ok());
  EXPECT_EQ(i->num_pipe_buffers, 2);
  EXPECT_EQ(i->steps.size(), 11u);  // M + S - 1
}

TEST(PipeSchedule, TrainTwoStagesFourMicroBatches) {
  EXPECT_EQ(train(4, 2, 0),
            (Lines{
                "LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "SendActivation(buffer_id=0)",
                "LoadMicroBatch(buffer_id=1) ForwardPass(buffer_id=1)",
                "RecvGrad(buffer_id=0) SendActivation(buffer_id=1) BackwardPass(buffer_id=0)",
                "LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "RecvGrad(buffer_id=1) SendActivation(buffer_id=0) BackwardPass(buffer_id=1)",
                "LoadMicroBatch(buffer_id=1) ForwardPass(buffer_id=1)",
                "RecvGrad(buffer_id=0) SendActivation(buffer_id=1) BackwardPass(buffer_id=0)",
                "",
                "RecvGrad(buffer_id=1) BackwardPass(buffer_id=1) ReduceTiedGrads() ReduceGrads() "
                "OptimizerStep()",
            }));
  EXPECT_EQ(train(4, 2, 1),
            (Lines{
                "",
                "RecvActivation(buffer_id=0) LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "BackwardPass(buffer_id=0)",
                "SendGrad(buffer_id=0) RecvActivation(buffer_id=1) LoadMicroBatch(buffer_id=1) "
                "ForwardPass(buffer_id=1)",
                "BackwardPass(buffer_id=1)",
                "SendGrad(buffer_id=1) RecvActivation(buffer_id=0) LoadMicroBatch(buffer_id=0) "
                "ForwardPass(buffer_id=0)",
                "BackwardPass(buffer_id=0)",
                "SendGrad(buffer_id=0) RecvActivation(buffer_id=1) LoadMicroBatch(buffer_id=1) "
                "ForwardPass(buffer_id=1)",
                "BackwardPass(buffer_id=1)",
                "SendGrad(buffer_id=1) ReduceTiedGrads() ReduceGrads() OptimizerStep()",
            }));
}

TEST(PipeSchedule, TrainThreeStagesTwoMicroBatches) {
  EXPECT_EQ(train(2, 3, 0),
            (Lines{
                "LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "SendActivation(buffer_id=0)",
                "LoadMicroBatch(buffer_id=1) ForwardPass(buffer_id=1)",
                "SendActivation(buffer_id=1)",
                "",
                "RecvGrad(buffer_id=0) BackwardPass(buffer_id=0)",
                "",
                "RecvGrad(buffer_id=1) BackwardPass(buffer_id=1) ReduceTiedGrads() ReduceGrads() "
                "OptimizerStep()",
            }));
  EXPECT_EQ(train(2, 3, 1),
            (Lines{
                "",
                "RecvActivation(buffer_id=0) ForwardPass(buffer_id=0)",
                "SendActivation(buffer_id=0)",
                "RecvActivation(buffer_id=1) ForwardPass(buffer_id=1)",
                "RecvGrad(buffer_id=0) SendActivation(buffer_id=1) BackwardPass(buffer_id=0)",
                "SendGrad(buffer_id=0)",
                "RecvGrad(buffer_id=1) BackwardPass(buffer_id=1)",
                "SendGrad(buffer_id=1) ReduceTiedGrads() ReduceGrads() OptimizerStep()",
            }));
  EXPECT_EQ(train(2, 3, 2),
            (Lines{
                "",
                "",
                "RecvActivation(buffer_id=0) LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "BackwardPass(buffer_id=0)",
                "SendGrad(buffer_id=0) RecvActivation(buffer_id=1) LoadMicroBatch(buffer_id=1) "
                "ForwardPass(buffer_id=1)",
                "BackwardPass(buffer_id=1)",
                "SendGrad(buffer_id=1)",
                "ReduceTiedGrads() ReduceGrads() OptimizerStep()",
            }));
}

TEST(PipeSchedule, TrainOneStageIsGradientAccumulation) {
  EXPECT_EQ(train(4, 1, 0),
            (Lines{
                "LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "BackwardPass(buffer_id=0)",
                "LoadMicroBatch(buffer_id=1) ForwardPass(buffer_id=1)",
                "BackwardPass(buffer_id=1)",
                "LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "BackwardPass(buffer_id=0)",
                "LoadMicroBatch(buffer_id=1) ForwardPass(buffer_id=1)",
                "BackwardPass(buffer_id=1) ReduceTiedGrads() ReduceGrads() OptimizerStep()",
            }));
}

TEST(PipeSchedule, InferenceThreeStagesTwoMicroBatches) {
  EXPECT_EQ(infer(2, 3, 0),
            (Lines{
                "LoadMicroBatch(buffer_id=0) ForwardPass(buffer_id=0)",
                "LoadMicroBatch(buffer_id=1) SendActivation(buffer_id=0) ForwardPass(buffer_id=1)",
                "SendActivation(buffer_id=1)",
                "",
            }));
  EXPECT_EQ(infer(2, 3, 1),
            (Lines{
                "",
                "RecvActivation(buffer_id=0) ForwardPass(buffer_id=0)",
                "RecvActivation(buffer_id=1) SendActivation(buffer_id=0) ForwardPass(buffer_id=1)",
                "SendActivation(buffer_id=1)",
            }));
  EXPECT_EQ(infer(2, 3, 2),
            (Lines{
                "",
                "",
                "LoadMicroBatch(buffer_id=0) RecvActivation(buffer_id=0) ForwardPass(buffer_id=0)",
                "LoadMicroBatch(buffer_id=1) RecvActivation(buffer_id=1) ForwardPass(buffer_id=1)",
            }));
}

// The training stream of one stage built event by event from the 1F1B timing (see the file
// comment). Within a step DeepSpeed orders: the exchange (a forward step sends the gradient
// before receiving the activation; a backward step receives the gradient before sending the
// activation), the load, the computation, and at the end of the batch the reductions.
std::vector<Step> train_by_timing(int M, int S, int s) {
  const int nb = std::max(2, std::min(S - s, M));
  std::vector<std::multimap<int, Instruction>> steps(static_cast<size_t>(2 * (M + S - 1)));
  enum Rank { kSendGrad, kRecvAct, kRecvGrad, kSendAct, kLoad, kCompute, kReduce };
  auto put = [&](int t, Rank rank, Op op, int m) {
    steps.at(static_cast<size_t>(t))
        .emplace(rank, Instruction{.op = op, .buffer_id = m % nb, .micro_batch = m});
  };
  for (int m = 0; m < M; ++m) {
    const int fwd = 2 * m + s, bwd = 2 * m + 2 * S - 1 - s;
    if (s > 0) put(fwd, kRecvAct, Op::kRecvActivation, m);
    if (s == 0 || s == S - 1) put(fwd, kLoad, Op::kLoadMicroBatch, m);
    put(fwd, kCompute, Op::kForwardPass, m);
    if (s < S - 1) put(fwd + 1, kSendAct, Op::kSendActivation, m);
    if (s < S - 1) put(bwd, kRecvGrad, Op::kRecvGrad, m);
    put(bwd, kCompute, Op::kBackwardPass, m);
    if (s > 0) put(bwd + 1, kSendGrad, Op::kSendGrad, m);
  }
  for (Op op : {Op::kReduceTiedGrads, Op::kReduceGrads, Op::kOptimizerStep}) {
    steps.back().emplace(kReduce, Instruction{.op = op});
  }
  std::vector<Step> out;
  for (const auto& step : steps) {
    Step s2;
    for (const auto& [rank, in] : step) s2.push_back(in);
    out.push_back(s2);
  }
  return out;
}

TEST(PipeSchedule, TrainMatchesOneFOneBTimingForEveryShape) {
  for (int S = 1; S <= 6; ++S) {
    for (int M = 1; M <= 10; ++M) {
      for (int s = 0; s < S; ++s) {
        auto got = train_schedule(M, S, s);
        ASSERT_TRUE(got.is_ok());
        EXPECT_EQ(got->steps, train_by_timing(M, S, s))
            << "S=" << S << " M=" << M << " stage " << s;
      }
    }
  }
}

TEST(PipeSchedule, ForwardStepsFollowTheDocumentedRule) {
  // "Forward runs on even steps of even stages and odd steps of odd stages, for micro-batch
  // step//2 - stage//2; other steps are backward" (4 stages, 8 micro-batches).
  const int S = 4, M = 8;
  for (int s = 0; s < S; ++s) {
    auto sc = train_schedule(M, S, s);
    ASSERT_TRUE(sc.is_ok());
    for (size_t t = 0; t < sc->steps.size(); ++t) {
      for (const Instruction& in : sc->steps[t]) {
        if (in.op == Op::kForwardPass) {
          EXPECT_EQ(static_cast<int>(t) % 2, s % 2);
          EXPECT_EQ(in.micro_batch, static_cast<int>(t) / 2 - s / 2);
        }
        if (in.op == Op::kBackwardPass) {
          EXPECT_NE(static_cast<int>(t) % 2, s % 2);
        }
      }
    }
  }
}

// Inference: micro-batch m is received, loaded and forwarded at step m + s in buffer m % 2,
// and sent on at step m + s + 1; even stages send before they receive, odd stages after.
std::vector<Step> inference_by_timing(int M, int S, int s) {
  std::vector<std::multimap<int, Instruction>> steps(static_cast<size_t>(M + S - 1));
  enum Rank { kLoad, kFirst, kSecond, kCompute };
  auto put = [&](int t, int rank, Op op, int m) {
    steps.at(static_cast<size_t>(t))
        .emplace(rank, Instruction{.op = op, .buffer_id = m % 2, .micro_batch = m});
  };
  const bool even = s % 2 == 0;
  for (int m = 0; m < M; ++m) {
    if (s == 0 || s == S - 1) put(m + s, kLoad, Op::kLoadMicroBatch, m);
    if (s > 0) put(m + s, even ? kSecond : kFirst, Op::kRecvActivation, m);
    put(m + s, kCompute, Op::kForwardPass, m);
    if (s < S - 1) put(m + s + 1, even ? kFirst : kSecond, Op::kSendActivation, m);
  }
  std::vector<Step> out;
  for (const auto& step : steps) {
    Step s2;
    for (const auto& [rank, in] : step) s2.push_back(in);
    out.push_back(s2);
  }
  return out;
}

TEST(PipeSchedule, InferenceMatchesTimingForEveryShape) {
  for (int S = 1; S <= 6; ++S) {
    for (int M = 1; M <= 10; ++M) {
      for (int s = 0; s < S; ++s) {
        auto got = inference_schedule(M, S, s);
        ASSERT_TRUE(got.is_ok());
        EXPECT_EQ(got->steps, inference_by_timing(M, S, s))
            << "S=" << S << " M=" << M << " stage " << s;
      }
    }
  }
}

TEST(PipeSchedule, BadShapesAreRefused) {
  auto no_mb = train_schedule(0, 2, 0);
  ASSERT_FALSE(no_mb.is_ok());
  EXPECT_NE(no_mb.status().message().find("gradient_accumulation_steps"), std::string::npos);
  auto no_stage = train_schedule(4, 0, 0);
  ASSERT_FALSE(no_stage.is_ok());
  EXPECT_NE(no_stage.status().message().find("--pipeline-parallel-size"), std::string::npos);
  EXPECT_FALSE(train_schedule(4, 2, 2).is_ok());
  EXPECT_FALSE(train_schedule(4, 2, -1).is_ok());
  EXPECT_FALSE(inference_schedule(0, 2, 0).is_ok());
}

}  // namespace
}  // namespace zt::pipe
