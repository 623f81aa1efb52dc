// cpu_allocator.cpp: the c10::Allocator over dtr::CachingAllocator (see cpu_allocator.h).
//
// Note [Immortal allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch keeps a raw pointer to its CPU allocator, and every DataPtr we hand out keeps a
// raw pointer to our deleter, which reaches the CachingAllocator through kCaching below.
// Tensors die late: Python finalization, then atexit handlers, then static destructors in
// reverse load order (libtorch's own statics hold tensors). So neither object may ever be
// destroyed: both are created with `new` on first installation and deliberately never
// deleted, and the library is never unloaded (torch.ops.load_library does not dlclose).
//
// Note [Foreign storages]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Storages allocated before installation (by c10's default allocator, or by another
// library's) carry their own DataPtr: c10 frees them through that DataPtr's deleter and
// context, never through PyTorch's current allocator. Our deleter sees only pointers we
// handed out; CachingAllocator::free stops the process (DTR_CHECK) on anything else, so a
// mix-up cannot pass silently. tests/torch/test_allocator_hook.py frees a tensor made
// before load_library after it.
//
// Note [Profiler sizes]
// ~~~~~~~~~~~~~~~~~~~~~
// torch.profiler(profile_memory=True) wants the size of every free. CachingAllocator::free
// does not return it, so when (and only when) a profiler listens, the size reported for a
// free is the drop in allocated_bytes.all.current around it: exact while one thread frees
// at a time (the CPU autograd engine runs on the calling thread), approximate when
// another thread allocates in between. Sizes are the rounded sizes the budget counts.
#include "integration/torch/cpu_allocator.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <typeinfo>

#include "dtr/allocator/caching_allocator.h"
#include "integration/torch/compat.h"

namespace dtr::torch_integration {

namespace {

// Set once by install_cpu_allocator, never reset: Note [Immortal allocator].
std::atomic<CachingAllocator*> kCaching{nullptr};
std::atomic<void (*)()> allocation_observer{nullptr};

void free_block(void* ptr) {
  CachingAllocator* caching = kCaching.load(std::memory_order_acquire);
  if (!torch_compat::memory_profiling_enabled()) {
    caching->free(ptr);
    return;
  }
  // Note [Profiler sizes]
  const uint64_t before = caching->stats().allocated_bytes.all.current;
  caching->free(ptr);
  const AllocatorStats after = caching->stats();
  const uint64_t now = after.allocated_bytes.all.current;
  const int64_t freed = before > now ? static_cast<int64_t>(before - now) : 0;
  torch_compat::report_memory_usage(ptr, -freed, now, after.reserved_bytes.all.current);
}

class DtrCpuAllocator final : public torch_compat::CpuAllocatorBase {
 public:
  explicit DtrCpuAllocator(CachingAllocator& caching) : caching_(caching) {}

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

 protected:
  c10::DataPtr allocate_bytes(size_t nbytes) const override {
    // c10's default allocator returns no memory for zero bytes; so do we (the DataPtr's
    // deleter is never called for a null context).
    if (nbytes == 0) return torch_compat::make_cpu_data_ptr(nullptr, nullptr, &free_block);
    if (auto observer = allocation_observer.load(std::memory_order_relaxed)) observer();
    AllocResult result = caching_.allocate(nbytes);
    if (!result.ok()) {
      const AllocatorOom& oom = result.oom;
      if (torch_compat::memory_profiling_enabled())
        torch_compat::report_out_of_memory(static_cast<int64_t>(oom.requested_bytes),
                                           oom.allocated_bytes, oom.reserved_bytes);
      torch_compat::throw_out_of_memory(oom.message());
    }
    if (torch_compat::memory_profiling_enabled()) {
      const AllocatorStats stats = caching_.stats();
      torch_compat::report_memory_usage(result.ptr,
                                        static_cast<int64_t>(round_block_size(nbytes)),
                                        stats.allocated_bytes.all.current,
                                        stats.reserved_bytes.all.current);
    }
    return torch_compat::make_cpu_data_ptr(result.ptr, result.ptr, &free_block);
  }

 private:
  CachingAllocator& caching_;
};

std::mutex install_mutex;
DtrCpuAllocator* installed = nullptr;  // guarded by install_mutex; never deleted

bool is_dtr_allocator(c10::Allocator* allocator) {
  // Compared by type name, not typeid: another copy of this library (loaded from another
  // path) has its own, hidden, type_info for the same class.
  return allocator && std::strcmp(typeid(*allocator).name(), typeid(DtrCpuAllocator).name()) == 0;
}

}  // namespace

InstallResult install_cpu_allocator(CachingAllocator& allocator) {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (installed) return InstallResult::already_installed;
  if (is_dtr_allocator(torch_compat::cpu_allocator())) return InstallResult::other_copy;
  kCaching.store(&allocator, std::memory_order_release);
  installed = new DtrCpuAllocator(allocator);  // Note [Immortal allocator]
  torch_compat::set_cpu_allocator(installed, kCpuAllocatorPriority);
  return InstallResult::installed;
}

bool cpu_allocator_is_ours() {
  std::lock_guard<std::mutex> lock(install_mutex);
  return installed && torch_compat::cpu_allocator() == installed;
}

void set_allocation_observer(void (*observer)()) {
  allocation_observer.store(observer, std::memory_order_relaxed);
}

std::string compiled_torch_version() { return torch_compat::compiled_torch_version(); }

std::string tested_torch_version() { return torch_compat::kTestedTorchVersion; }

}  // namespace dtr::torch_integration
