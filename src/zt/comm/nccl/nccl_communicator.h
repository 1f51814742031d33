// The NCCL backend (CUDA tensors). This header includes no CUDA or NCCL header, so the backend
// choice in communicator.cc can name it; nccl_communicator.cc is compiled only in CUDA builds.
#pragma once

#include <memory>

#include "zt/comm/communicator.h"
#include "zt/comm/store/tcp_store.h"

namespace zt {

// Creates this rank's NCCL communicator on `device`: rank 0 makes the unique id and puts it in
// `store`, the others read it; initialisation is non-blocking and bounded by env.timeout (a rank
// that never arrives makes the others fail with a kTimeout Status, not hang). Sets
// NCCL_NVLS_ENABLE=0 unless the environment already sets it.
// The NCCL library's version code (ncclGetVersion: 22703 = 2.27.3); 0 if unknown.
int nccl_version();

Result<std::unique_ptr<Communicator>> nccl_communicator_create(const DistEnv& env, Device device,
                                                               std::shared_ptr<TcpStore> store);

}  // namespace zt
