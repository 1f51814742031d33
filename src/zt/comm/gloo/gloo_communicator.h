// The Gloo backend (CPU tensors): Gloo's TCP transport over the rendezvous store, operations run in
// issue order on a worker thread (op_queue.h). Gloo has no bf16 and its f16 reduction is slow, so
// f16/bf16 reductions convert to f32 on the host, reduce, and round back once (a sum of W values
// is then rounded once, not W-1 times). all_gather, broadcast and send/recv move bytes and accept
// every dtype. This header includes no Gloo header; the factory lives in gloo_communicator.cc.
#pragma once

#include <memory>

#include "zt/comm/communicator.h"
#include "zt/comm/store/tcp_store.h"

namespace zt {

// Connects this rank's Gloo context to every other rank through `store` (kept for the
// communicator's life: on rank 0 it also serves the others), with env.timeout on every step.
// A rank that never arrives makes the others fail with a kTimeout Status naming it.
Result<std::unique_ptr<Communicator>> gloo_communicator_create(const DistEnv& env,
                                                               std::shared_ptr<TcpStore> store);

}  // namespace zt
