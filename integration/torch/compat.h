// compat.h: every PyTorch-version-specific call of integration/torch, in one place.
//
// What it is. The rest of integration/torch talks to PyTorch only through the names
// below, so porting to another PyTorch release means editing this header and compat.cpp
// and nothing else. Built and tested in CI against Debian's PyTorch 1.13.1 (TORCH_VERSION
// 1.13). On 2026-11-30 the library was also built against PyTorch 2.11 (pip, on a lent
// GPU machine, tests/torch/torch2_check.sh): it compiled with this file's branches and
// -Werror, and tests/torch ran there (results in the note below and in docs/pytorch.md,
// "Under PyTorch 2.x"). Releases in between were not built.
//
// Note [PyTorch 2.x changes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// What changes after 1.13, and where it lands in this file:
//  - c10::Allocator::allocate(size_t) is `const` in 1.13 and non-const from 2.3
//    (DTR_TORCH_ALLOCATE_IS_CONST); CpuAllocatorBase overrides the right one and forwards
//    to allocate_bytes(), so cpu_allocator.cpp does not change.
//  - 2.3 adds the pure virtual Allocator::copy_data(dest, src, count) const, used to
//    materialize copy-on-write storages: CpuAllocatorBase implements it with
//    default_copy_data() (a memcpy) when DTR_TORCH_HAS_COPY_DATA.
//  - 2.1+ storages may be copy-on-write (c10/core/impl/COW.h: a lazily cloned storage
//    shares one DataPtr whose context is a cow::COWDeleterContext). The allocator hook is
//    unaffected (a COW materialization allocates through us like any allocation), but the
//    eviction part must treat a COW storage as shared: refilling or evicting it in place
//    would change its twin. TensorBase::mutable_data_ptr() / const_data_ptr() (2.1+)
//    replace data_ptr() for raw access; the raw-access guard must hook both.
//  - StorageImpl::set_data_ptr_noswap keeps working for evict/remat in 2.x. 2.x's
//    StorageImpl::data() returns `const void*`, and mutable_data() (materializing a COW
//    storage first) gives the bytes to write: storage_address() and writable_bytes() below
//    are the two uses, the one never materializing, the other always where it must.
//  - c10::reportMemoryUsageToProfiler takes size_t totals in 2.x (int64_t in 1.13): the
//    call below converts either way.
//  - c10::OutOfMemoryError exists from 1.13 (torch.cuda.OutOfMemoryError in Python, a
//    RuntimeError); earlier releases have only c10::Error (DTR_TORCH_HAS_OOM_ERROR).
//  - Batch norm: 1.13's native_batch_norm mutates running stats without an `(a!)`
//    annotation; 2.x adds _native_batch_norm_legit / _native_batch_norm_legit_no_training
//    with proper annotations. kHiddenWriteBatchNorm names the op whose running stats are
//    treated as written (Note [Batch norm] in dispatch_hook.cpp). The 2.x `_legit` variants
//    carry annotations and need no special case. 2.11's native_batch_norm schema is still
//    unannotated (ATen/ops/native_batch_norm.h), so the name stays.
//  - The dispatch key of the fallback (kDtrKey): `Fake` is unused by core PyTorch 1.13.
//    2.x keeps the enumerator ("Out-of-core key for Fake Tensor in torchdistx" in 2.11's
//    DispatchKey.h); Python's FakeTensor mode uses the Python key, not it.
//  - Op tags (at::Tag::nondeterministic_seeded, inplace_view) exist from 1.13.
//  - at::Generator::clone() and at::detail::getDefaultCPUGenerator() (Note [Seeded ops] in
//    dispatch_hook.cpp) are unchanged in 2.x; 2.x adds graphsafe_get_state, not needed.
//  - Note [Lean batch-norm backward] (compat.cpp) calls ATen's internal
//    batch_norm_cpu_backward_stub, compiled for 1.13 only (DTR_TORCH_LEAN_BATCH_NORM).
//    2.x's CPU kernel still allocates grad_input twice on the same path, but its stub also
//    takes mixed BFloat16/float arguments: re-check its conditions against the release's
//    Normalization.cpp before enabling it there.
//
// Under 2.11 (torch2_check.sh run, 2026-11-30; 16 cores, pytest -n 8): 155 of 178 tests
// passed, 3 skipped, 20 failed. Since then fixed: 2.11's CPU LSTM kernel reads grad mode
// (Note [Op context] in lineage.cpp), which failed 4 (the LSTM scripts); the lean
// batch-norm test now skips its peak check where the lean kernel is not built. Left:
//  - Without the lean batch-norm backward, resnet18 at 0.5x and 0.46x and the reserved-
//    limit test run out of memory at the stem's batch-norm backward (its two buffers).
//  - gru_packed at 0.8x runs out of memory in clip_grad_norm_'s _foreach_norm (24 MiB
//    pinned of a 30.8 MiB budget); the runaway test's model ran out of memory before its
//    cascade.
//  - Not explained, and not reproduced when the same scripts ran alone on the same
//    machine: final parameters of sparse_embedding at 0.7x, a numpy read after a remat of
//    a from_numpy input, a tolist digest and an apply_ result differed from the run
//    without dtr; and pinned bytes exceeded allocated ones by 10 MB around deepcopy. Each
//    of the four recomputes a matrix product: MKL's dynamic threading under load is one
//    guess (tests/torch/conftest.py now sets MKL_DYNAMIC=FALSE).
//  - Test expectations of 1.13: op counts (test_lineage_memory), the text of
//    torch.cuda._memory_viz (test_observability), a C++ test program linked with -lc10
//    from the system (test_allocator_hook), and a 2-step MLP trace that replays under
//    dtr-sim's allocator model at 1.0 with 78 evictions (test_trace; none with
//    --allocator none).
//
// Lock rules: none here; every function is a thin wrapper.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DispatchKey.h>
#include <torch/version.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#define DTR_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||              \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// Note [PyTorch 2.x changes]: const allocate() until 2.3, copy_data() from 2.3.
#define DTR_TORCH_ALLOCATE_IS_CONST (!DTR_TORCH_VERSION_AT_LEAST(2, 3))
#define DTR_TORCH_HAS_COPY_DATA DTR_TORCH_VERSION_AT_LEAST(2, 3)
#define DTR_TORCH_HAS_OOM_ERROR DTR_TORCH_VERSION_AT_LEAST(1, 13)
// Note [Lean batch-norm backward] in compat.cpp: checked against 1.13's kernel only.
// x86-64 only: the stub's declaration depends on the CPU capabilities of the build.
#if TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR == 13 && defined(__x86_64__)
#define DTR_TORCH_LEAN_BATCH_NORM 1
#else
#define DTR_TORCH_LEAN_BATCH_NORM 0
#endif

namespace c10 {
struct IValue;
struct StorageImpl;
}
namespace at {
class Tensor;
}

namespace dtr::torch_compat {

// Note [Seeded ops] in dispatch_hook.cpp. `arg` is a seeded op's `Generator?` argument:
// a copy of the state of the generator it names, or of the default CPU generator when it
// is None, taken under that generator's lock.
c10::IValue snapshot_generator(const c10::IValue& arg);
// A fresh generator in the state of `snapshot` (one replay advances the one it is given).
c10::IValue copy_generator(const c10::IValue& snapshot);

// Note [Lean batch-norm backward]. `stack` holds the boxed arguments of
// aten::native_batch_norm_backward (and may hold more below them). Where they take the CPU
// kernel's contiguous path, computes the op with the kernel's own stub into one grad_input
// buffer, replaces the arguments by the three results and returns true; otherwise returns
// false and leaves `stack` alone, for the caller to run the op as usual. Call it below
// autograd, as a kernel.
bool lean_batch_norm_backward(std::vector<c10::IValue>& stack);
constexpr const char* kLeanBatchNormBackward = "aten::native_batch_norm_backward";

// Note [Observed fake quantization] in dispatch_hook.cpp: the fused observer and fake
// quantization of QAT, and the ops whose results are its own (the same bits, checked on
// 1.13 by tests/torch/test_fake_quant.py) once it has written the scale and zero point.
constexpr const char* kObservedFakeQuant = "aten::_fused_moving_avg_obs_fq_helper";
constexpr const char* kFakeQuantPerTensor =
    "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams";
constexpr const char* kFakeQuantPerChannel = "aten::fake_quantize_per_channel_affine_cachemask";
// Note [Observed RReLU] in dispatch_hook.cpp: RReLU's op in training mode, and the op
// whose result is its own (mul.Tensor of self and the noise it wrote; checked on 1.13 by
// tests/torch/test_rrelu.py).
constexpr const char* kObservedRRelu = "aten::rrelu_with_noise";
constexpr const char* kRReLUResult = "aten::mul";

// Note [Composites that read past the dispatcher] in dispatch_hook.cpp: CompositeImplicit
// ops of 1.13 whose kernels read these tensor arguments' memory directly (found by a
// helper's audit of 1.13.1's libtorch_cpu, 2026-12-05). "name.overload" and the argument
// names. The library's kernel for each holds them while the op runs; a later version
// where an op is no longer composite is left alone (the registration checks).
struct RawReadComposite {
  const char* op;
  const char* reads[3];  // held while it runs; nullptr where fewer
  const char* writes;    // written directly: pinned for good (nullptr: none)
  // It writes results of ops it called directly: nothing moves while it runs, and with
  // pin_results its results are pinned for good (a remat of the op that made one would
  // lose the writes); empty's results are never remade, so they need no pin.
  bool no_moves;
  bool pin_results;
};
inline constexpr RawReadComposite kRawReadComposites[] = {
    {"aten::_pad_packed_sequence", {"batch_sizes"}, nullptr, true, false},
    {"aten::_pack_padded_sequence_backward", {"batch_sizes"}, nullptr, false, false},
    {"aten::gru.data", {"batch_sizes"}, nullptr, false, false},
    {"aten::lstm.data", {"batch_sizes"}, nullptr, false, false},
    {"aten::rnn_tanh.data", {"batch_sizes"}, nullptr, false, false},
    {"aten::rnn_relu.data", {"batch_sizes"}, nullptr, false, false},
    {"aten::ctc_loss.Tensor", {"input_lengths", "target_lengths"}, nullptr, true, false},
    {"aten::tensor_split.tensor_indices_or_sections",
     {"tensor_indices_or_sections"},
     nullptr,
     false,
     false},
    {"aten::_reshape_from_tensor", {"shape"}, nullptr, false, false},
    {"aten::_rowwise_prune", {"weight", "mask"}, nullptr, true, false},
    {"aten::max_pool1d", {"self"}, nullptr, true, false},
    {"aten::nanmean.out", {"self"}, nullptr, true, false},
    {"aten::choose_qparams_optimized", {"input"}, nullptr, false, false},
    // Without grad: LAPACK writes through pointers held across the working copy's ops.
    {"aten::linalg_eigvals", {"self"}, nullptr, true, false},
    {"aten::linalg_eigvals.out", {"self"}, nullptr, true, false},
    {"aten::_grid_sampler_2d_cpu_fallback_backward",
     {"grad_output", "input", "grid"},
     nullptr,
     true,
     true},
    {"aten::_saturate_weight_to_fp16", {}, "weight", false, false},
    // torch.quasirandom.SobolEngine: its state and quasi, written in place directly.
    {"aten::_sobol_engine_initialize_state_", {}, "self", false, false},
    {"aten::_sobol_engine_scramble_", {"ltm"}, "self", true, false},
    {"aten::_sobol_engine_ff_", {"sobolstate"}, "self", false, false},
    {"aten::_sobol_engine_draw", {"quasi", "sobolstate"}, nullptr, true, true},
};

// Note [PyTorch 2.x changes]: the fallback's key, and the op with hidden writes.
constexpr c10::DispatchKey kDtrKey = c10::DispatchKey::Fake;
constexpr const char* kHiddenWriteBatchNorm = "aten::native_batch_norm";

// Note [Op context] in lineage.cpp: sets the intra-op thread count of the calling thread
// alone, the count its parallel regions and at::get_num_threads() there go by (OpenMP's
// nthreads-var, per thread). at::set_num_threads would also set the count other threads
// take up and resize the pthreadpool. A no-op where ATen's parallel backend is not OpenMP:
// the native backends refuse a new count once parallel work has started.
void set_intra_op_threads_here(int n);

// The version this library was compiled against, "1.13".
std::string compiled_torch_version();
// The release whose tests run in CI (Debian's). A build against another one says so once
// at start (runtime.cpp): Note [PyTorch 2.x changes] lists what a 2.11 run still failed.
constexpr const char* kTestedTorchVersion = "1.13";

// A c10::Allocator whose allocate() has the signature this PyTorch wants: derived
// classes implement allocate_bytes() and raw_deleter() once for every version.
class CpuAllocatorBase : public c10::Allocator {
 public:
#if DTR_TORCH_ALLOCATE_IS_CONST
  c10::DataPtr allocate(size_t nbytes) const final { return allocate_bytes(nbytes); }
#else
  c10::DataPtr allocate(size_t nbytes) final { return allocate_bytes(nbytes); }
#endif
#if DTR_TORCH_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    default_copy_data(dest, src, count);
  }
#endif

 protected:
  // Never returns an empty DataPtr for nbytes > 0: throws (throw_out_of_memory) instead.
  virtual c10::DataPtr allocate_bytes(size_t nbytes) const = 0;
};

// A CPU DataPtr whose memory is freed by deleter(context).
c10::DataPtr make_cpu_data_ptr(void* data, void* context, c10::DeleterFnPtr deleter);

// Makes `allocator` PyTorch's CPU allocator (c10::SetCPUAllocator); c10 keeps the one
// with the highest priority. `allocator` must live for the rest of the process.
void set_cpu_allocator(c10::Allocator* allocator, uint8_t priority);
// PyTorch's CPU allocator now (c10::GetCPUAllocator).
c10::Allocator* cpu_allocator();
// Note [Storages Python allocates] in dispatch_hook.cpp: if PyTorch's default CPU allocator
// (c10::GetDefaultCPUAllocator, which torch.UntypedStorage(n) uses on 1.13) made `impl`'s
// memory and another allocator is installed, moves the bytes into memory from that one
// (which may throw out of memory); true if it moved. Nothing else may hold the address.
bool move_to_cpu_allocator(c10::StorageImpl& impl);
// Note [Moving storages] in lineage.cpp: `impl`'s bytes are at `to` now (a block of our
// allocator, freed by `deleter`); its old block was freed by the allocator that moved it,
// so the old DataPtr is dropped without its deleter.
void repoint_storage(c10::StorageImpl& impl, void* to, c10::DeleterFnPtr deleter);

// The address of `impl`'s bytes (null when it has none), as a key for the allocator's
// tables: never written through, so a copy-on-write storage is not materialized.
void* storage_address(const c10::StorageImpl& impl);
// `impl`'s bytes, to write into (2.x: materializes a copy-on-write storage first).
void* writable_bytes(c10::StorageImpl& impl);

// Throws PyTorch's out-of-memory error (c10::OutOfMemoryError, torch.cuda.OutOfMemoryError
// in Python; c10::Error before 1.13) with `message`, then kCpuOutOfMemoryWords (Note
// [Out-of-memory words] in compat.cpp).
[[noreturn]] void throw_out_of_memory(const std::string& message);
constexpr const char* kCpuOutOfMemoryWords = "DefaultCPUAllocator: can't allocate memory";

// Note [Sparse tensors] in lineage.cpp. A tensor of another layout than strided (sparse
// COO; CSR, CSC, BSR, BSC) has no storage of its own: it holds dense tensors (indices,
// values) whose storages hold its memory. Appends those to `out`; nothing for a strided
// tensor or a layout whose memory is not in tensors (mkldnn).
void inner_tensors(const at::Tensor& t, std::vector<at::Tensor>& out);

// torch.profiler(profile_memory=True): whether a profiler listens on this thread, and the
// reports it wants (alloc_bytes < 0 for a free).
bool memory_profiling_enabled();
void report_memory_usage(void* ptr, int64_t alloc_bytes, uint64_t allocated_bytes,
                         uint64_t reserved_bytes);
void report_out_of_memory(int64_t alloc_bytes, uint64_t allocated_bytes,
                          uint64_t reserved_bytes);

}  // namespace dtr::torch_compat
