// The CUDA side of core/device.h, declared without CUDA headers so core/device.cc can call it.
// Implemented in cuda_backend.cc and caching_allocator.cc (which include cuda_runtime.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zt/core/device.h"

namespace zt::cuda {

int device_count();
std::string device_name(int index);
// Bytes of memory the device has in all (cudaDeviceProp::totalGlobalMem); 0 if unknown.
int64_t device_total_memory(int index);
void set_device(int index);
// Versions as CUDA encodes them (1000 * major + 10 * minor); 0 where unknown.
void versions(int* driver, int* runtime, int* toolkit, int* cublas);
// Compute capability 10 * major + minor; 0 if unknown.
int device_capability(int index);
void* stream_create(int device);
void stream_synchronize(void* stream);
// timing: 1 for an event that measures time, 0 for one that only orders streams (cheaper).
void* event_create(int device, int timing);
void event_destroy(void* event);
void event_record(void* event, void* stream);
void event_wait(void* event, void* stream);
void event_synchronize(void* event);
float event_elapsed_ms(void* start, void* end);

void* cache_allocate(int device, size_t bytes, void* stream);
void cache_free(int device, void* ptr, size_t bytes);
void cache_record_stream(int device, void* ptr, void* stream);
AllocatorStats cache_stats(int device);
void cache_reset_peak(int device);
void cache_empty(int device);
// CUDA graphs (CapturedGraph): the blocks handed out between capture_begin and capture_end (each
// once), and taking freed blocks back for the graph (false for one not free).
void cache_capture_begin(int device);
std::vector<void*> cache_capture_end(int device);
bool cache_reclaim(int device, void* ptr);

// Stream capture into a graph (relaxed mode) and its replay; graph_end returns the CUDA error's
// text, empty on success.
void graph_begin(void* stream);
std::string graph_end(void* stream, void** graph, void** exec);
void graph_launch(void* exec, void* stream);
void graph_destroy(void* graph, void* exec);

// kind: 0 host->device, 1 device->host, 2 device->device, 3 host->host.
void memcpy_async(void* dst, const void* src, size_t bytes, int kind, void* stream);
// `height` rows of `width` bytes, device to device, rows `dpitch` / `spitch` bytes apart.
void memcpy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                     size_t height, void* stream);
// Page-locked host memory (cudaHostAlloc, portable); throws HostOutOfMemory when CUDA refuses.
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* ptr);
// Page-locked host memory made the other way: an anonymous mapping (transparent huge pages
// asked for) whose pages `threads` OpenMP threads fault in, zeroed, in parallel, then registered
// with cudaHostRegister (portable). For large buffers: cudaHostAlloc faults and pins page by page
// in one thread under a driver lock. The memory is zero. Throws HostOutOfMemory like the above.
void* host_register_pinned(size_t bytes, int threads);
void host_unregister_pinned(void* ptr, size_t bytes);
void memset_async(void* dst, size_t bytes, void* stream);
void device_synchronize(int device);

}  // namespace zt::cuda
