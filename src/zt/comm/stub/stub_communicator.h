// The communicator of a single process (world size 1): every collective is a copy or nothing, done
// at once on the given stream. It lets the engine run one code path for 1 and N processes.
#pragma once

#include <memory>

#include "zt/comm/communicator.h"

namespace zt {

std::unique_ptr<Communicator> stub_communicator_create(Device device);

}  // namespace zt
