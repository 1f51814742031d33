// A minimal trainer of one's own: a DeepSpeed config, a GPT-2 model, random token batches, the
// engine's forward/backward/step loop. Usage: my_trainer ds_config.json [steps]
#include <zt/zt.h>

#include <cstdio>
#include <cstdlib>
#include <random>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ds_config.json [steps]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  auto config = zt::config_load(argv[1], /*world_size=*/1);
  if (!config.is_ok()) {
    std::fprintf(stderr, "%s\n", config.status().message().c_str());
    return 1;
  }
  zt::nn::Gpt2 model(*zt::nn::gpt2_config_named("gpt2-tiny"));
  const zt::Device device = zt::cuda_device_count() > 0 ? zt::Device::cuda(0) : zt::Device::cpu();
  auto engine = zt::initialize(model, *config, {.device = device});
  if (!engine.is_ok()) {
    std::fprintf(stderr, "%s\n", engine.status().message().c_str());
    return 1;
  }
  const int64_t batch = config->train_micro_batch_size_per_gpu, seq = 64;
  std::mt19937 rng(1);
  for (int step = 0; step < steps; ++step) {
    for (int64_t m = 0; m < config->gradient_accumulation_steps; ++m) {
      zt::Tensor tokens = zt::Tensor::empty({batch, seq}, zt::DType::i32);
      zt::Tensor targets = zt::Tensor::empty({batch, seq}, zt::DType::i32);
      for (int64_t i = 0; i < batch * seq; ++i) {
        tokens.data<int32_t>()[i] = static_cast<int32_t>(rng() % 257);
        targets.data<int32_t>()[i] = (tokens.data<int32_t>()[i] + 1) % 257;  // learnable
      }
      auto loss = (*engine)->forward(tokens, targets);
      if (!loss.is_ok()) return 1;
      if (!(*engine)->backward(*loss).is_ok() || !(*engine)->step().is_ok()) return 1;
    }
    std::printf("step %d loss %.4f\n", step + 1, (*engine)->last_step()->loss);
  }
  return 0;
}
