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

bool has_note(const Desc& engine, cudnnBackendNumericalNote_t note) {
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0;
  check(api()->BackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                   CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                   notes),
        "engine numerical notes");
  for (int64_t i = 0; i < n; ++i) {
    if (notes[i] == note) return true;
  }
  return false;
}

int64_t engine_index(const Desc& engine) {
  int64_t n = 0, index = -1;
  (void)api()->BackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64,
                                   1, &n, &index);
  return index;
}

std::unique_ptr<Plan> make_plan(const std::vector<const Desc*>& ops,
                                std::vector<std::unique_ptr<Desc>> descs,
                                const std::function<const char*(const Desc& engine)>& reject,
                                std::initializer_list<cudnnBackendHeurMode_t> modes) {
  cudnnHandle_t h = handle();
  auto plan = std::make_unique<Plan>();
  plan->graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  plan->graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
      .set_descs(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops)
      .finalize("operation graph");
  std::string why = "no engine";
  for (cudnnBackendHeurMode_t mode : modes) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, plan->graph)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    try {
      heur.finalize("engine heuristics");
    } catch (const Error& e) {
      why = e.what();
      continue;
    }
    int64_t count = 0;
    check(api()->BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
          "engine heuristics result count");
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    check(api()->BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
          "engine heuristics results");
    for (int64_t i = 0; i < got; ++i) {
      try {
        Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        cudnnBackendDescriptor_t e = engine.get();
        int64_t n = 0;
        check(api()->BackendGetAttribute(cfgs[i].get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
              "engine of a configuration");
        if (const char* no = reject(engine); no != nullptr) {
          why = no;
          continue;
        }
        const int64_t index = engine_index(engine);
        Desc p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        cudnnBackendDescriptor_t c = cfgs[i].get();
        p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
            .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c)
            .finalize("execution plan");
        int64_t ws = 0;
        check(api()->BackendGetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &n, &ws),
              "plan workspace size");
        plan->plan = std::move(p);
        plan->workspace = ws;
        plan->engine = index;
        plan->descs = std::move(descs);
        return plan;
      } catch (const Error& e) {
        why = e.what();
      }
    }
  }
  throw Error(why);
}

void execute(Plan& plan, const std::vector<std::pair<int64_t, void*>>& args, Device device,
             const Stream& s) {
  cudnnHandle_t h = handle();
  check(api()->SetStream(h, static_cast<cudaStream_t>(s.handle())), "cudnnSetStream");
  Tensor ws;
  void* ws_ptr = nullptr;
  if (plan.workspace > 0) {
    ws = Tensor::empty({plan.workspace}, DType::u8, device, s);
    ws_ptr = ws.data();
  }
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  for (const auto& [uid, ptr] : args) {
    if (ptr == nullptr) continue;
    uids.push_back(uid);
    ptrs.push_back(ptr);
  }
  Desc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  vp.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
         uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(ptrs.size()), ptrs.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr)
      .finalize("variant pack");
  check(api()->BackendExecute(h, plan.plan.get(), vp.get()), "cudnnBackendExecute");
}

}  // namespace zt::kernels::cuda::cudnn
