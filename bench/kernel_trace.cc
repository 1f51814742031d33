// CUPTI activity tracing for the benchmarks (see kernel_trace.h).
#include "kernel_trace.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#if ZT_BENCH_CUPTI
#include <cupti.h>
#endif

namespace zt::bench {
namespace {

// "void zt::kernels::cuda::(anonymous namespace)::rmsnorm_fwd<__nv_bfloat16, 8>(...)" ->
// "rmsnorm_fwd<__nv_bfloat16, 8>": the function's own name with its template arguments, which
// tell the variants apart; cuBLAS's and other libraries' plain symbols stay as they are.
std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  // "(anonymous namespace)::" would read as a parameter list below.
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) {
    s.erase(at, sizeof("(anonymous namespace)::") - 1);
  }
  // Cut the parameter list: the last '(' at template depth 0.
  int depth = 0;
  size_t cut = s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && i > 0) {
      cut = i;
      break;
    }
  }
  s.resize(cut);
  // Drop the return type and the namespaces: after the last "::" or ' ' at depth 0.
  depth = 0;
  size_t begin = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (depth == 0 && s[i] == ' ') begin = i + 1;
    if (depth == 0 && s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') begin = i + 2;
  }
  s = s.substr(begin);
  if (s.size() > 96) s = s.substr(0, 93) + "...";
  return s;
}

struct Span {
  uint64_t start, end;
  const std::string* name;
};

struct Totals {
  std::mutex mu;
  std::map<std::string, KernelTotal> by_name;
  std::map<const char*, std::string> names;  // CUPTI's name pointers stay valid: cache them
  std::vector<Span> spans;                   // every record, for the idle gaps
  void add(const char* raw, uint64_t start, uint64_t end) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = names.find(raw);
    if (it == names.end()) {
      // Copies and memsets ("[memcpy HtoD pinned]") keep their names: short_name would cut them
      // at the last space.
      it = names.emplace(raw, raw[0] == '[' ? std::string(raw) : short_name(raw)).first;
    }
    KernelTotal& t = by_name[it->second];
    t.name = it->second;
    t.ms += static_cast<double>(end - start) * 1e-6;
    ++t.count;
    spans.push_back({start, end, &it->second});
  }
};
Totals& totals() {
  static Totals t;
  return t;
}

#if ZT_BENCH_CUPTI
constexpr size_t kBufferBytes = 8u << 20;

// A stable name for each (direction, host memory kind) of copy: the totals key names by pointer.
const char* memcpy_name(uint8_t copy_kind, uint8_t src_kind, uint8_t dst_kind) {
  static std::mutex mu;
  static std::map<std::tuple<uint8_t, uint8_t, uint8_t>, std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, added] = names.try_emplace({copy_kind, src_kind, dst_kind});
  if (added) {
    const char* dir = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "HtoD"
                      : copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH"
                      : copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "DtoD"
                                                                     : "other";
    auto host = [](uint8_t k) {
      return k == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE ? "pageable"
             : k == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ? "pinned"
                                                      : "";
    };
    std::string h = host(copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? dst_kind : src_kind);
    it->second = "[memcpy " + std::string(dir) + (h.empty() ? "" : " " + h) + "]";
  }
  return it->second.c_str();
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        totals().add(k->name, k->start, k->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        // Named by direction and host memory kind ("[memcpy HtoD pageable]"), so the idle gaps
        // around the step's copies say which copy they follow.
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        totals().add(memcpy_name(m->copyKind, m->srcKind, m->dstKind), m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        static const char* kMemset = "[memset]";
        totals().add(kMemset, m->start, m->end);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

bool cupti_ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = "?";
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel trace: %s failed: %s\n", what, msg);
  return false;
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
#endif

}  // namespace

bool KernelTrace::start() {
#if ZT_BENCH_CUPTI
  {
    std::lock_guard<std::mutex> lock(totals().mu);
    totals().by_name.clear();
    totals().spans.clear();
  }
  if (!cupti_ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                "cuptiActivityRegisterCallbacks")) {
    return false;
  }
  for (CUpti_ActivityKind k : kKinds) {
    if (!cupti_ok(cuptiActivityEnable(k), "cuptiActivityEnable")) return false;
  }
  return true;
#else
  std::fprintf(stderr, "kernel trace: this build has no CUDA (CUPTI)\n");
  return false;
#endif
}

std::vector<KernelTotal> KernelTrace::stop() {
#if ZT_BENCH_CUPTI
  cupti_ok(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
#endif
  std::vector<KernelTotal> out;
  gaps_.clear();
  idle_ms_ = 0;
  {
    std::lock_guard<std::mutex> lock(totals().mu);
    for (auto& [name, t] : totals().by_name) out.push_back(t);
    std::vector<Span>& sp = totals().spans;
    std::sort(sp.begin(), sp.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
    uint64_t busy_until = 0;
    const std::string* last = nullptr;
    const uint64_t first = sp.empty() ? 0 : sp.front().start;
    for (const Span& s : sp) {
      if (last != nullptr && s.start > busy_until) {
        const double ms = static_cast<double>(s.start - busy_until) * 1e-6;
        idle_ms_ += ms;
        gaps_.push_back({ms, *last, *s.name, static_cast<double>(busy_until - first) * 1e-6});
      }
      if (s.end > busy_until) {
        busy_until = s.end;
        last = s.name;
      }
    }
  }
  std::sort(gaps_.begin(), gaps_.end(),
            [](const IdleGap& a, const IdleGap& b) { return a.ms > b.ms; });
  std::sort(out.begin(), out.end(),
            [](const KernelTotal& a, const KernelTotal& b) { return a.ms > b.ms; });
  return out;
}

nlohmann::json kernel_totals_json(const std::vector<KernelTotal>& totals, int steps, int top) {
  nlohmann::json rows = nlohmann::json::array();
  double rest_ms = 0;
  int64_t rest_count = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    if (static_cast<int>(i) < top) {
      rows.push_back({{"name", totals[i].name},
                      {"ms_per_step", totals[i].ms / steps},
                      {"launches_per_step", static_cast<double>(totals[i].count) / steps}});
    } else {
      rest_ms += totals[i].ms;
      rest_count += totals[i].count;
    }
  }
  if (rest_count > 0) {
    rows.push_back({{"name", "(the rest)"},
                    {"ms_per_step", rest_ms / steps},
                    {"launches_per_step", static_cast<double>(rest_count) / steps}});
  }
  return rows;
}

void kernel_totals_print(const std::vector<KernelTotal>& totals, int steps, int top,
                         double step_ms) {
  double all = 0;
  int64_t launches = 0;
  for (const KernelTotal& t : totals) {
    all += t.ms;
    launches += t.count;
  }
  std::fprintf(stderr,
               "kernel trace: %.2f ms of GPU work per step in %.0f launches (step %.2f ms, busy "
               "%.1f%%)\n",
               all / steps, static_cast<double>(launches) / steps, step_ms,
               step_ms > 0 ? 100.0 * all / steps / step_ms : 0.0);
  for (size_t i = 0; i < totals.size() && static_cast<int>(i) < top; ++i) {
    std::fprintf(stderr, "  %8.3f ms %5.1f%% %6.0fx  %s\n", totals[i].ms / steps,
                 all > 0 ? 100.0 * totals[i].ms / all : 0.0,
                 static_cast<double>(totals[i].count) / steps, totals[i].name.c_str());
  }
}

void idle_gaps_print(const KernelTrace& trace, int steps, int top) {
  std::fprintf(stderr, "GPU idle between records: %.2f ms per step in %zu gaps; the longest:\n",
               trace.idle_ms() / steps, trace.gaps().size());
  for (size_t i = 0; i < trace.gaps().size() && static_cast<int>(i) < top; ++i) {
    const IdleGap& g = trace.gaps()[i];
    std::fprintf(stderr, "  %8.3f ms  after %s  before %s\n", g.ms, g.after.c_str(),
                 g.before.c_str());
  }
}

nlohmann::json idle_gaps_json(const KernelTrace& trace, int steps, int top) {
  const double per_step = 1.0 / steps;
  struct Bin {
    const char* name;
    double below_ms;
    double ms = 0;
    int64_t count = 0;
  };
  Bin bins[] = {{"under_2us", 0.002}, {"2_to_5us", 0.005}, {"5_to_20us", 0.020},
                {"20_to_100us", 0.100}, {"100us_or_more", 1e300}};
  std::map<std::pair<std::string, std::string>, std::pair<double, int64_t>> pairs;
  for (const IdleGap& g : trace.gaps()) {
    for (Bin& b : bins) {
      if (g.ms < b.below_ms) {
        b.ms += g.ms;
        ++b.count;
        break;
      }
    }
    auto& [ms, count] = pairs[{g.after, g.before}];
    ms += g.ms;
    ++count;
  }
  nlohmann::json by_size = nlohmann::json::object();
  for (const Bin& b : bins) {
    by_size[b.name] = {{"ms_per_step", b.ms * per_step},
                       {"gaps_per_step", static_cast<double>(b.count) * per_step}};
  }
  std::vector<std::pair<std::pair<std::string, std::string>, std::pair<double, int64_t>>> sorted(
      pairs.begin(), pairs.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  nlohmann::json by_pair = nlohmann::json::array();
  for (size_t i = 0; i < sorted.size() && static_cast<int>(i) < top; ++i) {
    by_pair.push_back({{"after", sorted[i].first.first},
                       {"before", sorted[i].first.second},
                       {"ms_per_step", sorted[i].second.first * per_step},
                       {"gaps_per_step", static_cast<double>(sorted[i].second.second) * per_step}});
  }
  nlohmann::json longest = nlohmann::json::array();
  for (size_t i = 0; i < trace.gaps().size() && i < 12; ++i) {
    const IdleGap& g = trace.gaps()[i];
    longest.push_back({{"ms", g.ms}, {"at_ms", g.at_ms}, {"after", g.after}, {"before", g.before}});
  }
  return {{"by_size", by_size}, {"by_pair", by_pair}, {"longest", longest}};
}

}  // namespace zt::bench
