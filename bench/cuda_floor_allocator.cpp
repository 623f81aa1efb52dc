// cuda_floor_allocator.cpp: the least a CUDAPluggableAllocator can do, as a floor for
// bench/cuda_step_time.py (its `--library floor=...` row). Not part of dtr.
//
// Freed blocks go on an exact-size free list (sizes rounded to 512 bytes, keyed by device)
// under one mutex; a miss calls cudaMalloc; nothing is ever given back to CUDA and streams
// are ignored. So it is only safe for a program that allocates on one stream, as the
// step-time bench does, and after warm-up every request is a list pop. Timing it next to
// PyTorch's allocator and libdtr_cuda.so splits the pluggable route's cost in two: what
// PyTorch's CUDAPluggableAllocator wrapper costs any allocator (floor vs PyTorch's), and
// what dtr's table, budget and caching allocator add (dtr vs floor).
//
// Built as build/lib/libcuda_floor.so where DTR_WITH_CUDA is on (bench/CMakeLists.txt);
// tests/cuda/device_check.sh carries it to a GPU machine.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

// Process-wide by nature: PyTorch calls two C functions. One mutex guards both maps.
std::mutex g_mutex;
std::unordered_map<uint64_t, std::vector<void*>> g_free;  // (device, size) -> blocks

uint64_t key(int device, size_t rounded) { return (uint64_t(device) << 48) | rounded; }
size_t round_up(size_t size) { return (size + 511) & ~size_t{511}; }

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dtr_malloc(size_t size, int device,
                                                                   cudaStream_t) {
  if (size == 0) return nullptr;
  const size_t rounded = round_up(size);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto& list = g_free[key(device, rounded)];
    if (!list.empty()) {
      void* ptr = list.back();
      list.pop_back();
      return ptr;
    }
  }
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != device) cudaSetDevice(device);
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, rounded) != cudaSuccess) {
    cudaGetLastError();  // clear it; PyTorch sees the nullptr
    ptr = nullptr;
  }
  if (previous != device) cudaSetDevice(previous);
  return ptr;
}

extern "C" __attribute__((visibility("default"))) void dtr_free(void* ptr, size_t size, int device,
                                                                cudaStream_t) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_free[key(device, round_up(size))].push_back(ptr);
}
