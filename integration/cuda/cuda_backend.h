// cuda_backend.h: dtr::Backend over the CUDA runtime (cudaMalloc / cudaFree).
//
// A CudaBackend hands out segments of one CUDA device's memory. It is the only code in dtr
// that calls cudaMalloc; the caching allocator splits its segments into blocks.
//
// Contract (see include/dtr/allocator/backend.h):
//  - allocate_segment(bytes) returns device memory aligned to kCudaSegmentAlignment, or
//    nullptr when the device is out of memory (cudaErrorMemoryAllocation, cleared);
//  - any other CUDA failure throws CudaError (Note [CUDA errors] in cuda_backend.cpp);
//  - every call switches to the backend's device and back (Note [Device guard]).
// Lock rules: none of its own. Like every backend it is not thread-safe by itself: the
// caching allocator calls it under its lock (and the pluggable table under its own).
//
// This header does not include CUDA headers, so code that only holds a Backend needs no
// CUDA include path; errors carry the cudaError_t as an int.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "dtr/allocator/backend.h"

#define DTR_CUDA_API __attribute__((visibility("default")))

namespace dtr {

// All segment sizes and starts are multiples of this (Note [Segment alignment]).
constexpr size_t kCudaSegmentAlignment = 512;  // bytes

// A CUDA runtime failure other than out-of-memory. what() names the call, the device, the
// error name and cudaGetErrorString's text.
class DTR_CUDA_API CudaError : public std::runtime_error {
 public:
  CudaError(int code, const std::string& message);
  ~CudaError() override;
  int code() const { return code_; }  // the cudaError_t value

 private:
  int code_;
};

class DTR_CUDA_API CudaBackend final : public Backend {
 public:
  // Throws CudaError if `device` is not a usable CUDA device.
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  int device() const override { return device_; }
  size_t alignment() const override { return kCudaSegmentAlignment; }
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  bool serves_small() const override { return false; }
  bool memory_is_real() const override { return true; }

 private:
  int device_;
};

DTR_CUDA_API std::unique_ptr<Backend> make_cuda_backend(int device);

// Number of usable CUDA devices; 0 (never an exception) when there is no driver or GPU.
DTR_CUDA_API int cuda_device_count();
// Why cuda_device_count() is 0, e.g. "cudaErrorNoDevice: no CUDA-capable device is
// detected"; empty when at least one device is usable.
DTR_CUDA_API std::string cuda_unavailable_reason();

}  // namespace dtr
