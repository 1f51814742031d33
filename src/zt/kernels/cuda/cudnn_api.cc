#include "zt/kernels/cuda/cudnn_api.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "zt/core/assert.h"
#include "zt/core/cuda/cuda_check.h"

namespace zt::kernels::cuda::cudnn {
namespace {

std::string g_load_error;

const Api* load() {
  // libcudnn_graph holds the handle and the whole backend API; its engines live in the sibling
  // libraries it opens itself from the same search path.
  void* lib = dlopen("libcudnn_graph.so.9", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    g_load_error = fmt::format(
        "libcudnn_graph.so.9 was not found ({}); put cuDNN 9's library folder on LD_LIBRARY_PATH",
        e != nullptr ? e : "dlopen failed");
    return nullptr;
  }
  static Api a{};
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr) {
      ok = false;
      g_load_error = fmt::format("libcudnn_graph.so.9 lacks {}", name);
    }
  };
  sym(a.GetVersion, "cudnnGetVersion");
  sym(a.GetErrorString, "cudnnGetErrorString");
  sym(a.GetLastErrorString, "cudnnGetLastErrorString");
  sym(a.Create, "cudnnCreate");
  sym(a.SetStream, "cudnnSetStream");
  sym(a.BackendCreateDescriptor, "cudnnBackendCreateDescriptor");
  sym(a.BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor");
  sym(a.BackendSetAttribute, "cudnnBackendSetAttribute");
  sym(a.BackendGetAttribute, "cudnnBackendGetAttribute");
  sym(a.BackendFinalize, "cudnnBackendFinalize");
  sym(a.BackendExecute, "cudnnBackendExecute");
  if (!ok) return nullptr;
  // The graph API's fused attention needs cuDNN 9 (the backend ops used here exist from 9.0).
  const size_t v = a.GetVersion();
  if (v < 90000) {
    g_load_error = fmt::format("cuDNN {} is older than 9.0", v);
    return nullptr;
  }
  return &a;
}

}  // namespace

const Api* api() {
  static const Api* a = load();
  return a;
}

const std::string& load_error() {
  (void)api();
  return g_load_error;
}

cudnnHandle_t handle() {
  const Api* a = api();
  ZT_ASSERT(a != nullptr, "cuDNN used without a loaded library: {}", g_load_error);
  int dev = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  check(a->Create(&h), "cudnnCreate");
  handles.emplace(dev, h);
  return h;
}

void check(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  const Api* a = api();
  std::string detail;
  if (a != nullptr) {
    char buf[512] = {};
    a->GetLastErrorString(buf, sizeof(buf));
    detail = fmt::format("{}{}{}", a->GetErrorString(st), buf[0] != 0 ? ": " : "", buf);
  }
  throw Error(fmt::format("{} failed ({}{})", what, static_cast<int>(st),
                          detail.empty() ? "" : ", " + detail));
}

Desc::Desc(cudnnBackendDescriptorType_t type) {
  check(api()->BackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
}

Desc::Desc(Desc&& o) noexcept : d_(o.d_) {
  o.d_ = nullptr;
}

Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_ != nullptr) api()->BackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

Desc::~Desc() {
  if (d_ != nullptr) api()->BackendDestroyDescriptor(d_);
}

Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                const void* values) {
  const cudnnStatus_t st = api()->BackendSetAttribute(d_, name, type, count, values);
  // (the attribute's number is formatted only on failure: variant packs are set on every call)
  if (st != CUDNN_STATUS_SUCCESS) {
    check(st, fmt::format("cudnnBackendSetAttribute({})", static_cast<int>(name)).c_str());
  }
  return *this;
}

Desc& Desc::set_i64(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> v) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.begin());
}

Desc& Desc::set_i64(cudnnBackendAttributeName_t name, const std::vector<int64_t>& v) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
}

Desc& Desc::set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t t) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &t);
}

Desc& Desc::set_bool(cudnnBackendAttributeName_t name, bool b) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &b);
}

Desc& Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& d) {
  cudnnBackendDescriptor_t p = d.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
}

Desc& Desc::set_descs(cudnnBackendAttributeName_t name, const std::vector<const Desc*>& ds) {
  std::vector<cudnnBackendDescriptor_t> p;
  p.reserve(ds.size());
  for (const Desc* d : ds) p.push_back(d->get());
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(p.size()), p.data());
}

void Desc::finalize(const char* what) {
  check(api()->BackendFinalize(d_), what);
}

cudnnDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    default:
      ZT_ASSERT(false, "no cuDNN data type for {}", dtype_name(dt));
  }
  return CUDNN_DATA_FLOAT;
}

}  // namespace zt::kernels::cuda::cudnn
