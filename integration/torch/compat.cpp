// compat.cpp: the version-specific calls declared in compat.h (Note [PyTorch 2.x changes]).
//
// Note [Lean batch-norm backward]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's CPU native_batch_norm_backward allocates grad_input (empty_like) before it
// looks at the memory formats, and on its usual path (input and grad_out both contiguous,
// or both channels-last) allocates it a second time before the first is freed: the op
// needs two buffers the size of its input for one result (32 MiB for the 16 MiB stem of
// resnet18 on 128x128 images, measured with torch.profiler). Under a budget that buffer
// sets the floor: at the stem's batch-norm backward, with nothing left to evict, the
// parameters, the input batch, the op's two inputs and both buffers were 0.51 of
// resnet18's peak (docs/pytorch.md, "How low the budget goes").
// On that path the fallback (and a remat) run the op here instead: one grad_input in the
// memory format the kernel would give it, grad_weight and grad_bias as it allocates them,
// and the kernel's own stub (batch_norm_cpu_backward_stub), so the bits are the kernel's.
// Any other case (a mixed-dtype call, another layout or device, strided inputs, no
// grad_input wanted) returns false and runs PyTorch's kernel. tests/torch/
// test_batch_norm_backward.py compares results and strides with PyTorch's and checks the
// op's peak.
#include "integration/torch/compat.h"

#if DTR_TORCH_LEAN_BATCH_NORM
// DispatchStub.h declares DispatchStubImpl::get_call_ptr with one pointer per CPU
// capability that PyTorch was built with; Debian's amd64 libtorch_cpu has AVX2 and AVX512.
#define HAVE_AVX2_CPU_DEFINITION
#define HAVE_AVX512_CPU_DEFINITION
#include <ATen/native/batch_norm.h>
#endif

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Config.h>
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#if AT_PARALLEL_OPENMP
#include <omp.h>
#endif

#include <cstring>
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

void set_intra_op_threads_here(int n) {
#if AT_PARALLEL_OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

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

bool move_to_cpu_allocator(c10::StorageImpl& impl) {
  c10::Allocator* installed = c10::GetCPUAllocator();
  c10::Allocator* fallback = c10::GetDefaultCPUAllocator();
  if (installed == fallback || !impl.data() || impl.nbytes() == 0 ||
      impl.data_ptr().get_deleter() != fallback->raw_deleter())
    return false;
  const size_t nbytes = impl.nbytes();
  c10::DataPtr moved = installed->allocate(nbytes);
  std::memcpy(moved.get(), impl.data(), nbytes);
  impl.set_data_ptr_noswap(std::move(moved));  // frees the old memory
  return true;
}

void repoint_storage(c10::StorageImpl& impl, void* to, c10::DeleterFnPtr deleter) {
  c10::DataPtr old = impl.set_data_ptr(make_cpu_data_ptr(to, to, deleter));
  old.release_context();
}

void* storage_address(const c10::StorageImpl& impl) { return impl.data_ptr().get(); }

void* writable_bytes(c10::StorageImpl& impl) {
#if DTR_TORCH_VERSION_AT_LEAST(2, 1)
  return impl.mutable_data();
#else
  return impl.data();
#endif
}

// Note [Out-of-memory words]: batch-size finders (Accelerate's find_executable_batch_size,
// Lightning's batch-size scaler) halve the batch on a RuntimeError with one argument that
// holds "CUDA out of memory." or "DefaultCPUAllocator: can't allocate memory", the words of
// PyTorch's CUDA and CPU allocators, and re-raise anything else. dtr's allocator stands in
// for the CPU one, so its message ends with the CPU allocator's words and those finders
// halve the batch under a budget too (tests/torch/test_oom.py).
void throw_out_of_memory(const std::string& message) {
  const std::string text = message + " [" + kCpuOutOfMemoryWords +
                           ": the words of PyTorch's CPU allocator, which batch-size finders "
                           "look for]";
#if DTR_TORCH_HAS_OOM_ERROR
  C10_THROW_ERROR(OutOfMemoryError, text);
#else
  C10_THROW_ERROR(Error, text);
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

bool lean_batch_norm_backward(std::vector<c10::IValue>& stack) {
#if DTR_TORCH_LEAN_BATCH_NORM
  // native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
  //                            save_mean?, save_invstd?, train, eps, output_mask[3])
  constexpr size_t kArgs = 10;
  if (stack.size() < kArgs) return false;
  c10::IValue* args = stack.data() + (stack.size() - kArgs);
  if (!args[0].isTensor() || !args[1].isTensor() || !args[9].isBoolList()) return false;
  const at::Tensor& grad_out = args[0].toTensor();
  const at::Tensor& input = args[1].toTensor();
  const c10::List<bool> mask = args[9].toBoolList();
  if (mask.size() != 3 || !mask[0]) return false;
  const at::ScalarType dtype = input.scalar_type();
  auto plain = [dtype](const at::Tensor& t) {
    return t.device().is_cpu() && t.layout() == c10::kStrided && t.scalar_type() == dtype;
  };
  if (!plain(input) || !plain(grad_out) || input.dim() < 2) return false;
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  at::Tensor optional[5];  // weight, running_mean, running_var, save_mean, save_invstd
  for (size_t i = 0; i < 5; ++i) {
    const c10::IValue& v = args[2 + i];
    if (v.isNone()) continue;
    if (!v.isTensor()) return false;
    optional[i] = v.toTensor();
    if (optional[i].defined() && !plain(optional[i])) return false;
  }
  // The kernel's contiguous path: both contiguous, or both channels-last.
  auto contiguous = [](const at::Tensor& t) {
    return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast);
  };
  if (!contiguous(input) || !contiguous(grad_out) ||
      input.suggest_memory_format() != grad_out.suggest_memory_format())
    return false;
  const bool train = args[7].toBool();
  const double eps = args[8].toDouble();
  at::Tensor grad_input = at::empty_like(
      input, input.is_contiguous() ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast);
  at::Tensor grad_weight, grad_bias;
  if (mask[1]) grad_weight = at::empty({input.size(1)}, input.options());
  if (mask[2]) grad_bias = at::empty({input.size(1)}, input.options());
  at::native::batch_norm_cpu_backward_stub(c10::DeviceType::CPU, grad_input, grad_weight, grad_bias,
                                           grad_out, input, optional[0], optional[1], optional[2],
                                           optional[3], optional[4], train, eps);
  torch::jit::drop(stack, kArgs);
  torch::jit::push(stack, std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
  return true;
#else
  (void)stack;
  return false;
#endif
}

void inner_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) {
  switch (t.layout()) {
    case c10::kSparse: {
      const auto* impl = static_cast<const at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
      out.push_back(impl->indices());
      out.push_back(impl->values());
      break;
    }
    case c10::kSparseCsr:
    case c10::kSparseCsc:
    case c10::kSparseBsr:
    case c10::kSparseBsc: {
      const auto* impl = static_cast<const at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl());
      out.push_back(impl->compressed_indices());
      out.push_back(impl->plain_indices());
      out.push_back(impl->values());
      break;
    }
    default: break;
  }
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
