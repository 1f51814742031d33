// cuDNN, loaded at run time: the backend (graph) API's functions from libcudnn_graph.so.9, found
// with dlopen the first time one is needed. ZeroTrain does not link cuDNN, so a machine without it
// runs everything else (the kernels that would use it fall back to ZeroTrain's own; see
// docs/performance.md "Attention backends"). Only host code includes this header.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zt/core/tensor.h"

namespace zt::kernels::cuda::cudnn {

struct Api {
  decltype(&::cudnnGetVersion) GetVersion;
  decltype(&::cudnnGetErrorString) GetErrorString;
  decltype(&::cudnnGetLastErrorString) GetLastErrorString;
  decltype(&::cudnnCreate) Create;
  decltype(&::cudnnSetStream) SetStream;
  decltype(&::cudnnBackendCreateDescriptor) BackendCreateDescriptor;
  decltype(&::cudnnBackendDestroyDescriptor) BackendDestroyDescriptor;
  decltype(&::cudnnBackendSetAttribute) BackendSetAttribute;
  decltype(&::cudnnBackendGetAttribute) BackendGetAttribute;
  decltype(&::cudnnBackendFinalize) BackendFinalize;
  decltype(&::cudnnBackendExecute) BackendExecute;
};

// The loaded library, or nullptr when it cannot be loaded (why: load_error()). Thread-safe; the
// first call tries once.
const Api* api();
const std::string& load_error();

// The calling thread's handle for the current device (created on first use, never destroyed:
// cuDNN may be unloaded before static destructors run).
cudnnHandle_t handle();

// What a failed cuDNN call throws: the caller decides whether that is fatal (running a plan that
// was built) or a reason to use another kernel (building a plan cuDNN does not support).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws Error naming `what`, the status and cuDNN's last message when `st` is not success.
void check(cudnnStatus_t st, const char* what);

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type);
  Desc(Desc&&) noexcept;
  Desc& operator=(Desc&&) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc();

  cudnnBackendDescriptor_t get() const { return d_; }
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
            const void* values);
  Desc& set_i64(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> v);
  Desc& set_i64(cudnnBackendAttributeName_t name, const std::vector<int64_t>& v);
  Desc& set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t t);
  Desc& set_bool(cudnnBackendAttributeName_t name, bool b);
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& d);
  Desc& set_descs(cudnnBackendAttributeName_t name, const std::vector<const Desc*>& ds);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(DType dt);

// An execution plan for one operation graph, with the descriptors the graph is made of (alive as
// long as the plan).
struct Plan {
  std::vector<std::unique_ptr<Desc>> descs;
  Desc graph;
  Desc plan;
  int64_t workspace = 0;
  int64_t engine = -1;  // cuDNN's global engine index (for logs)
};

// Whether an engine's numerical notes include `note` (CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
// ..._TENSOR_CORE, ...).
bool has_note(const Desc& engine, cudnnBackendNumericalNote_t note);

// The plan of the first engine cuDNN's heuristics (mode A, then the fallback list) rank for the
// graph of `ops` that `reject` does not refuse: reject(engine) returns why not (a short phrase)
// or nullptr to take it. `descs` are the graph's descriptors, kept by the plan. Throws Error
// naming the last reason when no engine runs the graph.
// `modes` are the heuristic modes asked, in order.
std::unique_ptr<Plan> make_plan(const std::vector<const Desc*>& ops,
                                std::vector<std::unique_ptr<Desc>> descs,
                                const std::function<const char*(const Desc& engine)>& reject,
                                std::initializer_list<cudnnBackendHeurMode_t> modes = {
                                    CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK});

// The engine's global index (-1 when cuDNN does not say).
int64_t engine_index(const Desc& engine);

// Runs `plan` on stream `s` with the variant pack {uid: pointer} (a null pointer: a tensor this
// variant of the graph does not have, left out), with a workspace from the device's allocator.
void execute(Plan& plan, const std::vector<std::pair<int64_t, void*>>& args, Device device,
             const Stream& s);

}  // namespace zt::kernels::cuda::cudnn
