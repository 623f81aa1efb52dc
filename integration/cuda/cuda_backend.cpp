// cuda_backend.cpp: CudaBackend, segments from cudaMalloc / cudaFree on one device.
//
// Every CUDA call goes through a DeviceGuard (Note [Device guard]); out-of-memory is a
// nullptr, every other failure a CudaError (Note [CUDA errors]). No state besides the
// device index, so there is nothing to lock here.
#include "integration/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "dtr/core/check.h"

namespace dtr {

// Note [CUDA errors]
// ~~~~~~~~~~~~~~~~~~
// cudaMalloc failing with cudaErrorMemoryAllocation is an expected event: the backend
// clears it (cudaGetLastError, so a later unrelated check does not see it) and returns
// nullptr, and the caching allocator answers by releasing cached segments and retrying.
// Any other error is not something an allocator can recover from: either the caller broke
// the contract (a double free is cudaErrorInvalidValue), the device index is bad, or the
// context is dead (a "sticky" error such as cudaErrorIllegalAddress from an earlier
// kernel, which every later call returns again). Carrying on would hand out memory on a
// broken context, so the backend throws CudaError, whose message names the call, the
// device, the error and cudaGetErrorString's text. These failures are rare, so an
// exception costs nothing on the hot path. Whoever calls the backend from a destructor or
// across a C ABI (pluggable_allocator.cpp) must catch it.
// The one error ignored is cudaErrorCudartUnloading from cudaFree: at process exit the
// runtime may be torn down before the last tensors are freed, and the memory goes back to
// the driver with the context anyway (PyTorch's allocator ignores it for the same reason).

// Note [Device guard]
// ~~~~~~~~~~~~~~~~~~~
// cudaMalloc allocates on the calling thread's current device, and PyTorch moves that
// device around. Each backend call therefore sets its own device first and restores the
// caller's afterwards, so the backend neither depends on nor changes the thread's state.
// cudaSetDevice is skipped when the device is already current (it is cheap, not free).

// Note [Segment alignment]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The CUDA programming guide promises only 256-byte alignment for cudaMalloc. The caching
// allocator rounds every size to 512 bytes (as PyTorch's kMinBlockSize) and its Backend
// contract says segment starts are multiples of alignment(), so block addresses stay
// 512-aligned only if segment starts are. In practice cudaMalloc returns addresses aligned
// far beyond 512 bytes; rather than assume it, allocate_segment checks each pointer and
// throws CudaError (after freeing it) if a driver ever breaks the assumption.

namespace {

std::string error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

[[noreturn]] void throw_cuda_error(cudaError_t err, const std::string& call, int device) {
  (void)cudaGetLastError();  // clear it, so the next unrelated check does not see it
  throw CudaError(
      static_cast<int>(err),
      "dtr: " + call + " on CUDA device " + std::to_string(device) + " failed: " + error_text(err));
}

// See Note [Device guard].
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaError_t err = cudaGetDevice(&previous_);
    if (err != cudaSuccess) throw_cuda_error(err, "cudaGetDevice", device);
    if (previous_ != device) {
      err = cudaSetDevice(device);
      if (err != cudaSuccess) throw_cuda_error(err, "cudaSetDevice", device);
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    // Restoring cannot fail for a device that was current a moment ago; if it does, the
    // context is gone and the next call reports it.
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace

CudaError::CudaError(int code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

CudaError::~CudaError() = default;

CudaBackend::CudaBackend(int device) : device_(device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) throw_cuda_error(err, "cudaGetDeviceCount", device);
  if (device < 0 || device >= count) {
    throw CudaError(static_cast<int>(cudaErrorInvalidDevice),
                    "dtr: CUDA device " + std::to_string(device) + " does not exist (" +
                        std::to_string(count) + " device(s) visible)");
  }
}

CudaBackend::~CudaBackend() = default;

void* CudaBackend::allocate_segment(size_t bytes) {
  DTR_CHECK(bytes > 0 && bytes % kCudaSegmentAlignment == 0,
            "segment size must be a positive multiple of alignment()");
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // Note [CUDA errors]: expected, cleared, reported as nullptr
    return nullptr;
  }
  const std::string call = "cudaMalloc(" + std::to_string(bytes) + " bytes)";
  if (err != cudaSuccess) throw_cuda_error(err, call, device_);
  if (reinterpret_cast<uintptr_t>(ptr) % kCudaSegmentAlignment != 0) {
    // Note [Segment alignment]
    (void)cudaFree(ptr);
    throw CudaError(static_cast<int>(cudaErrorMisalignedAddress),
                    "dtr: " + call + " on CUDA device " + std::to_string(device_) +
                        " returned a pointer not aligned to " +
                        std::to_string(kCudaSegmentAlignment) + " bytes");
  }
  return ptr;
}

void CudaBackend::free_segment(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  DeviceGuard guard(device_);
  cudaError_t err = cudaFree(ptr);
  if (err == cudaErrorCudartUnloading) {
    (void)cudaGetLastError();  // Note [CUDA errors]: process teardown
    return;
  }
  if (err != cudaSuccess) {
    throw_cuda_error(err, "cudaFree(" + std::to_string(bytes) + "-byte segment)", device_);
  }
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return error_text(err);
  }
  return count > 0 ? std::string() : std::string("cudaGetDeviceCount found 0 devices");
}

}  // namespace dtr
