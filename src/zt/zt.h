// ZeroTrain's public API in one include: `#include <zt/zt.h>`.
// Config (DeepSpeed's ds_config.json), the engine (zt::initialize), models (every family, named
// sizes and Hugging Face model directories: zt::ckpt::model_open; exports) and the Unit/Model
// interfaces and layers for your own, the ops your units call, generation and evaluation weights,
// data (token files, batches), the communicators for multi-process training.
#pragma once

#include "zt/build_config.h"
#include "zt/checkpoint/hf_export.h"
#include "zt/checkpoint/model_open.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/core/device.h"
#include "zt/core/log.h"
#include "zt/core/status.h"
#include "zt/core/tensor.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/tokenizer/byte_tokenizer.h"
#include "zt/data/token_file.h"
#include "zt/kernels/ops.h"
#include "zt/nn/generate.h"
#include "zt/nn/layer.h"
#include "zt/nn/model.h"
#include "zt/nn/models/gpt2.h"
#include "zt/nn/models/registry.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"
#include "zt/runtime/inference.h"
