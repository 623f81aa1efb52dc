// compat.cpp: the version-specific calls declared in compat.h (Note [PyTorch 2.x changes]).
#include "integration/torch/compat.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <limits>
#include <mutex>

namespace dtr::torch_compat {

namespace {

// The profiler's totals are int64_t in 1.13; an unlimited count cannot occur, but clamp
// rather than wrap.
int64_t to_int64(uint64_t value) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return static_cast<int64_t>(value > kMax ? kMax : value);
}

}  // namespace

std::string compiled_torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

c10::DataPtr make_cpu_data_ptr(void* data, void* context, c10::DeleterFnPtr deleter) {
  return c10::DataPtr(data, context, deleter, c10::Device(c10::DeviceType::CPU));
}

void set_cpu_allocator(c10::Allocator* allocator, uint8_t priority) {
  c10::SetCPUAllocator(allocator, priority);
}

c10::Allocator* cpu_allocator() { return c10::GetCPUAllocator(); }

void throw_out_of_memory(const std::string& message) {
#if DTR_TORCH_HAS_OOM_ERROR
  C10_THROW_ERROR(OutOfMemoryError, message);
#else
  C10_THROW_ERROR(Error, message);
#endif
}

c10::IValue snapshot_generator(const c10::IValue& arg) {
  at::Generator gen = arg.isNone() ? at::detail::getDefaultCPUGenerator() : arg.toGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return c10::IValue(gen.clone());
}

c10::IValue copy_generator(const c10::IValue& snapshot) {
  return c10::IValue(snapshot.toGenerator().clone());
}

bool memory_profiling_enabled() { return c10::memoryProfilingEnabled(); }

void report_memory_usage(void* ptr, int64_t alloc_bytes, uint64_t allocated_bytes,
                         uint64_t reserved_bytes) {
  c10::reportMemoryUsageToProfiler(ptr, alloc_bytes, to_int64(allocated_bytes),
                                   to_int64(reserved_bytes), c10::Device(c10::DeviceType::CPU));
}

void report_out_of_memory(int64_t alloc_bytes, uint64_t allocated_bytes,
                          uint64_t reserved_bytes) {
  c10::reportOutOfMemoryToProfiler(alloc_bytes, to_int64(allocated_bytes),
                                   to_int64(reserved_bytes), c10::Device(c10::DeviceType::CPU));
}

}  // namespace dtr::torch_compat
