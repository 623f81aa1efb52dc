// cpu_allocator.h: PyTorch's CPU allocator hook (ARCHITECTURE.md "Proven" 10), torch-free.
//
// What it is. install_cpu_allocator() makes a c10::Allocator backed by one
// dtr::CachingAllocator PyTorch's CPU allocator: every at::empty-style CPU allocation
// from then on (oneDNN outputs included) comes from the caching allocator and counts
// against its budget. Not seen: external memory (from_numpy, from_blob), shared memory,
// BLAS/oneDNN scratch, and storages allocated before installation.
//
// Invariants. The c10::Allocator and the CachingAllocator it uses live for the rest of
// the process (Note [Immortal allocator] in cpu_allocator.cpp): a tensor may be freed by a
// static destructor after every atexit handler has run. A DataPtr we hand out always
// frees through our deleter; a storage allocated before installation keeps its own
// DataPtr deleter and never reaches us. An allocation that does not fit throws PyTorch's
// out-of-memory error with AllocatorOom::message().
//
// Lock rules: none of its own; the CachingAllocator's mutex guards everything.
#pragma once

#include <cstdint>
#include <string>

namespace dtr {

class CachingAllocator;

namespace torch_integration {

// c10 keeps the CPU allocator with the highest priority; the default one has 0.
constexpr uint8_t kCpuAllocatorPriority = 100;

enum class InstallResult : uint8_t {
  installed,          // ours is PyTorch's CPU allocator now
  already_installed,  // this copy of the library installed it before: nothing changed
  other_copy,         // a different copy of libdtr_torch.so installed its own: nothing changed
};

// Installs the hook over `allocator`, which must live for the rest of the process.
// Thread-safe; only the first call in a process installs.
InstallResult install_cpu_allocator(CachingAllocator& allocator);

// True when PyTorch's CPU allocator is this library's hook now.
bool cpu_allocator_is_ours();

// Called at the start of every allocation the hook serves, on the allocating thread (the
// lineage's Note [Threads] in dispatch_hook.cpp); null: none. Set once, before use.
void set_allocation_observer(void (*observer)());

// Note [Measuring workspaces] in cpu_allocator.cpp: while one is open on a thread, the
// hook counts what that thread allocates and frees again. close() gives the op's scratch:
// the most it held at once of what it allocated, less what it still holds (its results).
// A meter opened while another is open on the same thread measures nothing (0): the outer
// one counts it all. Not copyable; closes itself if close() was not called.
class WorkspaceMeter {
 public:
  explicit WorkspaceMeter(bool on);
  ~WorkspaceMeter();
  WorkspaceMeter(const WorkspaceMeter&) = delete;
  WorkspaceMeter& operator=(const WorkspaceMeter&) = delete;
  uint64_t close();

 private:
  bool open_ = false;
};

// The PyTorch version the library was compiled against ("1.13").
std::string compiled_torch_version();
// The release its tests ran against, in CI ("1.13"; Note [PyTorch 2.x changes] in compat.h).
std::string tested_torch_version();

}  // namespace torch_integration
}  // namespace dtr
