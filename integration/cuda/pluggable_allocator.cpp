// pluggable_allocator.cpp: dtr_malloc / dtr_free for torch.cuda.memory.CUDAPluggableAllocator.
//
// Design: the C ABI over one process-wide PluggableTable (Note [Process-wide state]) whose
// backends are CudaBackends: the table does the caching per (device, stream), the budget
// and the counters (pluggable_table.cpp). No exception crosses the C ABI: each entry point
// catches and reports on stderr, after the table's lock is released.
#include "integration/cuda/pluggable_allocator.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

// Note [Null from dtr_malloc]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The C ABI has no error channel besides nullptr. PyTorch's CUDAPluggableAllocator (2.x
// sources, torch/csrc/cuda/CUDAPluggableAllocator.cpp) does not check the pointer: a
// refused request becomes a tensor whose data pointer is null, and the failure shows up
// later (an illegal address or a "data is not allocated" error), not as
// torch.cuda.OutOfMemoryError. So every refusal prints one line on stderr saying why:
// budget, live bytes, request and what to try. Raising a real c10::OutOfMemoryError needs
// the torch integration (integration/torch/), which may link libtorch; this file may not.
// A size-0 request returns nullptr silently: PyTorch's own allocator does the same, and a
// DataPtr holding nullptr never calls the deleter.

// Note [Process-wide state]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch calls a plain C function, so the state behind it must be process-wide: this is
// the one place dtr allows that (STYLE.md rule 7). It is created on the first call, never
// in a static initialiser, and deliberately never destroyed: PyTorch frees tensors during
// interpreter shutdown, possibly after this library's static destructors have run, and a
// destroyed table would turn those frees into use-after-free. The process exit returns the
// memory to the driver.

namespace dtr {
namespace {

PluggableTable& state() {
  // Note [Process-wide state]: created on first use, never destroyed.
  static PluggableTable* instance = new PluggableTable(make_cuda_backend);
  return *instance;
}

void report(const std::string& message) {
  if (!message.empty()) std::fprintf(stderr, "dtr: %s\n", message.c_str());
}

}  // namespace

PluggableDeviceStats pluggable_device_stats(int device) { return state().stats(device); }

uint64_t pluggable_empty_cache(int device) { return state().empty_cache(device); }

void pluggable_reload_config() { state().reload_config(); }

}  // namespace dtr

extern "C" void* dtr_malloc(size_t size, int device, cudaStream_t stream) {
  if (size == 0) return nullptr;  // Note [Null from dtr_malloc]
  std::string message;
  void* ptr = nullptr;
  try {
    ptr = dtr::state().allocate(size, device, stream, message);
  } catch (const std::exception& e) {
    message = "dtr_malloc: " + dtr::without_dtr_prefix(e.what());
    ptr = nullptr;
  }
  dtr::report(message);
  return ptr;
}

extern "C" void dtr_free(void* ptr, size_t size, int device, cudaStream_t /*stream*/) {
  if (ptr == nullptr) return;
  std::string message;
  try {
    dtr::state().deallocate(ptr, size, device, message);
  } catch (const std::exception& e) {
    message = "dtr_free: " + dtr::without_dtr_prefix(e.what());
  }
  dtr::report(message);
}

extern "C" const char* dtr_cuda_memory_stats_json(int device) {
  thread_local std::string text;
  try {
    text = dtr::state().stats_json(device);
  } catch (const std::exception& e) {
    dtr::report("dtr_cuda_memory_stats_json: " + dtr::without_dtr_prefix(e.what()));
    text = "{}";
  }
  return text.c_str();
}

extern "C" uint64_t dtr_cuda_empty_cache(int device) {
  try {
    return dtr::state().empty_cache(device);
  } catch (const std::exception& e) {
    dtr::report("dtr_cuda_empty_cache: " + dtr::without_dtr_prefix(e.what()));
    return 0;
  }
}

extern "C" void dtr_cuda_reset_peak_stats(int device) {
  try {
    dtr::state().reset_peaks(device);
  } catch (const std::exception& e) {
    dtr::report("dtr_cuda_reset_peak_stats: " + dtr::without_dtr_prefix(e.what()));
  }
}
