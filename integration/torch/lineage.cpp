// lineage.cpp: the host of the DTR engine inside PyTorch (lineage_impl.h has the model).
//
// Note [Engine lock]
// ~~~~~~~~~~~~~~~~~~
// The engine is single-threaded; one lock serializes every use of it. It is recursive by
// design, not by accident: while this thread holds it to rematerialize (the op's own
// allocations) or to copy a storage (Note [Copy on write]), the caching allocator may call
// make_room on the same thread, and the engine is consistent at those points (Note [Budget
// owner] in eviction/engine.cpp). Another thread asking for room waits, except an ATen
// worker inside a parallel region: its caller may be the thread holding the lock, waiting
// for the region to end, so the worker only tries the lock and, failing, frees nothing
// (its allocation then fails with the out-of-memory error).
//
// Note [Mutation]
// ~~~~~~~~~~~~~~~
// An op that writes a tensor (an (a!) argument) changes a storage that lineage may need
// as it was. Before it runs, for each written storage S the engine knows:
//  - if a recorded op read S (it has readers): Note [Copy on write], except below;
//  - else, if S is pinned, it stays pinned: the new value is a constant;
//  - else, if the op is recordable in place (one written tensor, returns alias it) and S
//    has fewer than kMaxVersions versions: the op is recorded as a new version of S (an
//    alias output in the engine), so rematerializing S re-runs its op, then this one;
//    readers that made only S itself (its earlier versions, views such as unsafe_chunk)
//    need no copy then, since rematerializing S replays them in order;
//  - else S is pinned for good (a persistent buffer mutated every step, such as a momentum
//    buffer, would otherwise grow an unbounded chain of versions).
// 1.13's LSTM cell writes its gates five times in place (add_, then sigmoid_, sigmoid_,
// tanh_, sigmoid_ through unsafe_chunk views): counting every reader, and with 4 versions
// at most, each cell copied its gates twice (3 steps of the chunked LSTM script allocated
// 20760 times, 19178 without lineage and now) and ran a full collect before each write.
// A storage written more often than kMaxVersions times with only such readers (a gradient
// accumulated in place over the time steps) is copied then, and its chain starts again:
// pinning it for good instead ran the LSTM script out of memory at 0.6 of its peak (48.7
// MiB pinned).
//
// Note [Overwrite]
// ~~~~~~~~~~~~~~~~~
// zero_, fill_ and copy_ on a tensor that covers its whole storage do not read the old
// value. Recorded as a new version, they would tie the storage to its whole past: a
// gradient zeroed by opt.zero_grad() would stay recomputable only through the previous
// step's backward pass and its old parameters. Instead the user's storage gets a new
// engine storage made by the op from its other inputs alone (none for zero_), and the old
// engine storage is orphaned (copied first if lineage reads it: Note [Copy on write]) and
// discarded. zero_ and fill_ with a number make even a pinned storage recomputable (a
// zeroed gradient is then evictable until the next backward pass writes it). A copy_ into
// a fresh buffer is not (tried 2026-11-30: making autograd's CopySlices buffer, filled by
// copy_ from the incoming gradient, that copy_'s output let a loop of `y[:, :k] += z`
// train at 0.55 of its peak where it ran out of memory at 0.7, but the packed GRU under
// `auto` at 0.75 then hit the runaway stop in its first step, test_policy_trial.py; the
// buffer stays pinned, and with it what the slice write reaches, Note [Pinned writes]).
// Tried again the next session with only a chain's first buffer made so (a copy_ from a
// buffer filled so left pinned: `outputs[t] = h`, pad_packed_sequence): the GRU test
// passed and the toy trained at 0.55, but test_thrash.py's runaway cascade took 130 s to
// be stopped where it took 18 s (57 s with Note [Cutoff scores]), and a deepcopy's clone,
// filled by copy_ in memory that is not yet ours, became evictable and ran a tight budget
// out of memory (tests/torch/test_raw_access.py). Not landed: docs/pytorch.md, "Mutation".
// Lineage that reads S only to make S again does not count: a gradient clipped in place
// (clip_grad_norm_'s mul_, a new version of S) and evicted was refilled at zero_grad just
// to be zeroed, or failed for want of room (tests/torch/test_overwrite.py).
//
// Note [Parameters]
// ~~~~~~~~~~~~~~~~~~
// A parameter made under no_grad (nn.init's fills, a model's constructor in
// torch.no_grad()) is a pinned constant, and each optimizer step is a write to a pinned
// storage (Note [Pinned writes]). One made in grad mode, as `nn.Parameter(torch.randn(n)
// * 0.02)`, is a recorded op's output, so the step was recorded as a new version of it,
// with the lineage of every step before; with zero_grad called after the forward pass, the
// next zero_ reached it through the gradients and pinned the parameter's version and the
// live activations computed from it: a probe ran out of memory at 0.7 of its peak with 65
// MiB pinned, and passed at 0.7 and 0.5 with the same parameters made under no_grad. A
// written leaf that requires grad is a parameter (autograd allows in-place writes to one
// only under no_grad, as optimizers make them): it is pinned before the write, as if made
// under no_grad. tests/torch/test_pinned_writes.py.
//
// Note [Wrapped numbers]
// ~~~~~~~~~~~~~~~~~~~~~~~
// `x * 1.5` reaches the dispatcher as mul.Tensor with the number wrapped in a 0-dim
// tensor that only this call sees. Registering it as an input would add a pinned engine
// constant per op (a record, a hash entry, a collect to discard it), for 8 bytes that
// nothing can mutate. It is not an input: the recorded call keeps the wrapped tensor
// itself among its arguments, and a remat passes the same value.
//
// Note [Copy on write]
// ~~~~~~~~~~~~~~~~~~~~
// Lineages that read S's old value must keep reading it. The old value is copied into a
// new StorageImpl S', every snapshot that pointed at S is pointed at S', and S' takes S's
// engine storage (lineage, pin, children). The user's S then gets a new engine storage:
// the in-place op recorded with S' as its input (rematerializing S copies S' into S and
// re-runs the op), or a pinned constant when the op is not recorded. One copy per written
// storage per step: an optimizer step copies each parameter once, which is cheaper than
// pinning everything the forward pass computed from the old parameters (ARCHITECTURE.md
// "Proven" 5). The copy is dead to the program at once; it lives as long as some lineage
// may need it (Note [Collecting dead lineage] in collector.cpp).
//
// Note [Hot-path allocations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every op pays for what the fallback allocates, and in a PyTorch process small objects
// come from glibc's malloc, which costs several times what mimalloc does. A loop of small
// ops (`x * 1.0001`, bench/torch_op_overhead.py) made 9 mallocs per op without the library
// and 29 with it. Now 12: the fallback reuses one PendingOp per thread (its scratch vectors
// keep their capacity); an op record keeps its arguments and slots inline for up to four
// (SmallVector); a snapshot has no version counter; the engine's lock marks live on the
// stack; and the tables that gain and lose a node per op (by_impl_, the caching
// allocator's live blocks) take their nodes from mimalloc. What is left per op: the
// snapshot (a TensorImpl) per input, and the engine's and this file's records, which are
// reused after retiring (Note [Retiring] in eviction/engine.cpp).
//
// Note [Warm start in PyTorch]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// DTR_PLAN=plan.json makes the engine follow a static plan made (dtr-plan) from a trace
// this host recorded (DTR_TRACE) of the same script: a PlanGuide (Note [Warm start] in
// eviction/plan_guide.cpp) wraps this host's hooks, and the host tells it of every engine
// op, as the simulator's replay does: after each recorded op, once its inputs are unlocked
// (after_op), and after each constant (register_constant, before the reading op locks
// anything). Plan node k is the k-th storage the engine makes; this host reuses retired
// ids, so the guide numbers storages itself (Note [Creation index]). A rerun of the script
// makes the same storages in the same order (the same ops, outputs, constants at first use
// and copies on write; views and opaque ops make none, here as in the trace), whatever the
// budget, so node k is storage k. Where the run departs (another batch size, more steps
// than the trace had), the guide stops for good and the policy carries on: a plan made from
// a 2-step trace guides the first two steps of a longer run. The report's
// dtr.plan_departure says where (tests/torch/test_plan.py).
//
// Note [Packed masks]
// ~~~~~~~~~~~~~~~~~~~
// A dropout mask is the costliest storage per byte to re-make: 1.13's CPU dropout draws
// it with bernoulli_ (Note [Seeded ops] in dispatch_hook.cpp), whose per-element
// generator takes about 6 ms for 8 MiB of float32 here, where the mask's own divide and
// multiply take well under 1 ms each. In replays of the transformer scripts at 0.5x,
// drawing masks again was half the recompute time. But bernoulli_ writes only 0 and 1: one
// bit per element says which, so once the budget binds (the engine has evicted), each
// bernoulli_ that overwrites its whole storage (Note [Overwrite]) packs what it wrote
// (core/packed_mask.h), and a remat unpacks it instead of drawing again: the same bytes,
// whatever the dtype, and the generator is not touched. The bits (1/32 of a float32
// mask's bytes) come from the same allocator, so the budget counts them; they go with the
// op's lineage (drop_lineage). The engine charges a remat of that op what the packing took
// (Note [Remat cost] in eviction/engine.cpp), so the policies see a mask as cheap to
// evict; unpacking is somewhat faster than packing (about 0.21 against 0.28 ms for 8 MiB
// of float32 since Note [Vector masks] in core/packed_mask.cpp; 1.0 against 1.6 ms before),
// so that cost is an upper bound. Before the first eviction nothing is packed: a run that
// fits its budget pays nothing, and masks drawn before then are replayed as before. A run
// that records a trace (DTR_TRACE) packs from the start, so that the trace, which is
// usually recorded without a binding budget, gives a replay the remat costs a run under
// the budget would have (REMAT_TIME).
//
#include "integration/torch/lineage_impl.h"

#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/hash.h>

#include <unistd.h>
#define XXH_INLINE_ALL  // header-only: Note [Writes outside the dispatcher]
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dtr/core/check.h"
#include "dtr/core/packed_mask.h"
#include "dtr/eviction/heuristic_registry.h"
#include "integration/torch/compat.h"
#include "integration/torch/cpu_allocator.h"
#include "integration/torch/exit_writers.h"

namespace dtr::torch_integration {

namespace {

constexpr uint32_t kMaxVersions = 8;  // Note [Mutation]
// Note [Chains through copies]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A storage written in place past kMaxVersions while lineage reads it is copied away, and
// its new value is recorded as the write's output (Note [Copy on write]), whose remat
// reruns the write on the copy: a chain that the version cap of Note [Mutation] never
// cuts, as each copy starts at version 0. A gradient accumulated step after step with no
// zero_grad (Note [Overwrite] starts a chain afresh) grew it without end: a 64x64 weight
// trained by (randn(16, 64) @ w).relu().sum().backward() ran out of memory under 64 MiB at
// step 8187, its pinned memory full and its next remat 8187 ops deep (the seventy-seventh
// session's probe; without the library it runs 20000 steps). So the writes are counted
// across copies, and past kMaxChainWrites a write made after a copy is not recorded: the
// new value is a constant, pinned when next read, and its chain is cut. An LSTM's
// gradient accumulated over a sequence's time steps writes far fewer times than that
// between two zero_grads.
constexpr uint32_t kMaxChainWrites = 256;
constexpr uint64_t kMinOpsBetweenCollects = 1024;  // full collects: Note [Collecting dead lineage]
// Dead scans of all live storages: every 64 ops under a budget (with none, the scans of
// Note [Temporaries] take their place), and before every op while a trace is recorded with
// no budget, so that the trace's RELEASE of a dead storage comes before the next op
// allocates, as the memory would come back without lineage (Note [Recording a trace] in
// recording.cpp; under a budget, Note [Tracing under a budget] in collector.cpp).
constexpr uint64_t kOpsBetweenDeadScans = 64;
// Note [Discards in a trace]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A dead pinned storage (a dropout mask, a live descendant pinned by Note [Pinned writes],
// an old parameter value) is freed only by a full collect, which finds that no lineage
// needs it and DISCARDs it. Under a budget a full collect runs at the next eviction
// request once such deaths reach kSmallPinnedBytes (Note [Collects when making room]), so
// it goes soon; with no budget, only every kMinOpsBetweenCollects ops or more. A trace is
// recorded with no budget, and the simulator holds a pinned storage until its DISCARD: on
// the LSTM script the step-1 logits (15.6 MiB, pinned at the optimizer step) died early in
// step 2 and were DISCARDed 4500 events later, after step 2's backward, so every replayed
// policy ran out of memory at 0.6-0.7 of the baseline peak where the live run trains at
// 0.6. So while tracing with no budget, a full collect runs before the next op once pinned
// storages of kSmallPinnedBytes or more have died since the last one (batched: the small
// pinned storages of Note [Small storages] die all the time).
// The same goes for the cut of Note [Dead constants]: under a budget a full collect comes
// before the next eviction after such a write (Note [Collects when making room]), so a
// gradient written in place while a dead constant is held is pinned before anything could
// evict it. With no budget the cut waited for the next pinned death, a micro-batch later:
// the trace of 4 micro-batches (patterns.py) had step 1's soft pins at op 101 where a run
// under 0.8 of its peak made them at ops 72-101, as each gradient was written, and its
// replays at 0.8 ran out of memory. So while tracing with no budget, a full collect also
// runs before the next op once an op wrote a new version (Note [Mutation]) while the last
// full collect found a dead constant still needed. Under a budget the collects come at the
// eviction requests, as untraced (Note [Tracing under a budget] in collector.cpp).

// Note [Temporaries]
// ~~~~~~~~~~~~~~~~~~
// Most storages die young: an op's output read by the next op or two and dropped (a
// transformer's attention scores, every intermediate of an activation function). Only
// snapshots hold them then, so they stay allocated until a scan finds them dead. Under a
// budget that is what we want: a dead storage is a free cache that make_room releases
// before evicting anything live, and lineage may need it for a remat. Releasing them as
// soon as they die made remat chains longer and runs at the edge of feasibility fail
// (tested: the depth-12 MLP at 0.6 of its peak ran out of memory with 6 dead 2 MiB relu
// outputs locked in one chain). With no budget nothing is ever recomputed, and holding
// them up to kOpsBetweenDeadScans ops only raised the peak: the transformer script's was
// 194 MiB with lineage against 149 MiB without. So with no budget the newest
// kNewestScanned storages (the last entries of alive_) are scanned after every op: the
// same script's peak is then 152 MiB. Older storages that die (saved activations the
// backward lets go of) would wait for the scan every kOpsBetweenDeadScans ops: a
// GELU/LayerNorm MLP's training steps peaked at 120 MiB with lineage, 100 MiB without.
// Scanning all of alive_ after every op costs per op what the program holds (1.6% more
// main-thread time on the chunked LSTM script). So all of alive_ is scanned only when an
// allocation would raise a peak (before_new_peak, Note [New peaks] in
// allocator/caching_allocator.cpp), at most once per op: that MLP then peaks at 100.2
// MiB, resnet18 and the LSTM LM within 32 KiB of plain PyTorch
// (tests/torch/test_lineage_memory.py). These two scans replace the one every
// kOpsBetweenDeadScans ops, which then only cost time: without it scan_for_dead fell from
// 1.0% to 0.3% of the chunked LSTM script's samples (1 thread), and no peak moved.
// dtr.set_budget switches between them (lineage_budget_changed).
constexpr size_t kNewestScanned = 16;
// Note [Small storages]
// ~~~~~~~~~~~~~~~~~~~~~
// Evicting a storage smaller than option min_evictable (16 KiB by default) frees next to
// nothing, yet keeps its whole lineage needed: a loss scalar the script holds across
// opt.step() would otherwise need every old parameter value (Note [Copy on write]) to stay
// recomputable. Such outputs are pinned when recorded; they are still freed when they die.
// The bound was fixed until 2026-12-04, and a deep, narrow model got nothing from a budget:
// an MLP 300 layers deep and 64 wide on a batch of 48 (12 KiB activations) ran out of
// memory at 0.9 of its peak with nothing evictable, and at min_evictable:4K trains down to
// 0.75 (tests/torch/test_small_storages.py). 4 KiB is no default: the RReLU CNN of
// test_rrelu.py ran out of memory at 0.5 with 9.28 MiB pinned where 16 KiB trains, and
// min_evictable:9216 against 9217 decides it. The storages of 9216 B there are its 3x3
// convolutions' weight gradients (16x16x3x3 floats), which live through the step and whose
// lineage is the forward pass. Small storages make long evicted chains: a residual MLP
// 1000 layers deep at 4 KiB ran for minutes under auto (at 0.9 of its peak one day, at
// 0.6 the next; 99% of the samples in Engine::evicted_neighborhood_compute), where
// policy:dtr_eq trained in 5.5 s and 22 s. That was the searches' time charged to the ops
// (Note [Host work in op times]); since, auto trains it at 0.6 in 15.6 s (16 KiB, dtr_eq:
// 17.7 s at 0.9, out of memory at 0.7).
// When a budget runs out of memory with enough of its pinned bytes in such results, the
// error says so and suggests a lower bound (Lineage::oom_advice): the deep, narrow MLP's
// said only "pinned 10.59 MiB ... evictable 0 B".
// Dead pinned storages smaller than kSmallPinnedBytes (lineage_impl.h) are not worth a
// full collect of their own (batched: the small pinned storages above die all the time)
// nor a cut (Note [Dead constants]).

// What becomes of an op's output when it is recorded (PendingOp::evictable).
enum OutputKeep : char {
  kKeepPinned = 0,     // a view, or memory our allocator did not make
  kKeepEvictable = 1,  // may be evicted
  kKeepSmall = 2,      // pinned for being under min_evictable (StorageRec::small)
};

// Note [Small storages]: option min_evictable in bytes; at 0, every result that holds
// memory (a storage of no bytes frees nothing).
uint64_t min_evictable_bytes(const Config& config) {
  return std::max<uint64_t>(config.min_evictable.bytes, 1);
}

// Note [Op context]
// ~~~~~~~~~~~~~~~~~
// A remat must compute the bytes the op first computed, yet the op's arguments are not all
// it reads. Before this note a remat ran the op from the top of the dispatcher, in whatever
// state the program was in when it touched the evicted tensor, and three kinds of state
// leaked in (found by probes, 2026-11-29):
//  - Dispatch keys above dtr's. A tensor made outside torch.autocast and read inside it was
//    recomputed through AutocastCPU: its mm ran in bfloat16 and the process died on the
//    size check below. The op now runs with `OpRec::keys`, the keys below dtr's that the
//    fallback passed it on with (redispatchBoxed), so autocast, autograd, vmap and the
//    like, which already ran above dtr when the op first ran, do not run again. The lean
//    kernels (Note [Lean batch-norm backward]) dispatch their own allocations, so the remat
//    also excludes the autocast keys.
//  - Process state that kernels read: the default dtype (an integer division, a factory
//    without a dtype), mkldnn enabled or not (which convolution kernel runs; their
//    results differ in low bits), and deterministic algorithms.
//  - Thread state: the intra-op thread count (torch.set_num_threads), which decides how
//    some kernels split their work: index_put_ with accumulate adds serially on one thread
//    only (Note [Thread-order results] in dispatch_hook.cpp), and 1.13's x.sum() over 2^16
//    floats or more gave other bits on one thread than on two for most inputs tried, though
//    a result that small is never evicted (Note [Small storages]); test_op_context.py
//    registers a kernel that reads the count. MXCSR's flush-to-zero and denormals-are-zero
//    bits, which torch.set_flush_denormal sets on the calling thread: with them off at the
//    remat, values the op had flushed to zero came back as denormals. And grad mode: a
//    kernel may read it below autograd. PyTorch 2.11's CPU LSTM kernel (mkldnn_rnn_layer)
//    returns its workspace only in grad mode; a forward op recomputed in the backward
//    pass, which the engine runs with grad mode off, came back without it, and the library
//    died reading its storage (tests/torch/torch2_check.sh, 2026-11-30). No 1.13 kernel is
//    known to read it; test_op_context.py registers one that does.
//  - The quantized engine (torch.backends.quantized.engine), process state that picks
//    which kernel quantized::add and its kin run: results made under onednn and remade
//    after the program switched to qnnpack came back with other bits (a probe, 2026-12-07).
// `OpRec::context` (op_context.h) packs the last three into one word when the op is
// recorded, and OpContextScope puts it back around the remat where it differs from the
// current one, then restores. A program that never changes them pays one read of each per
// recorded op and per remat (about 34 ns an op here, 7-9 ns more for the thread count).
// The thread count is set for the calling thread alone (OpenMP's per-thread count,
// torch_compat::set_intra_op_threads_here), and never raised in the child of a fork: a
// first version raised it there, and a forked child that had set one thread, as DataLoader
// workers do, hung in GNU OpenMP, whose pool does not survive a fork. There a remat runs on
// the child's count, which may give other bits than the parent's call (the one case left
// open). Changing process state for a remat while another thread runs an op would race
// with it; only a program that changes that state itself while ops run on other threads
// can get there, and it races without dtr too.
// The keys never hold Python's (DispatchKey::Python, below dtr's): an op that ran through
// a TorchDispatchMode is not recorded (Note [Dispatch modes] in dispatch_hook.cpp). Not
// covered: state an op reads that is neither (CUDA's flags, which CPU kernels do not
// read).

// Note [Writes outside the dispatcher]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A remat re-runs an op on the inputs its record holds, and gets the same bits only if
// those hold the bytes they held when the op first ran. Every write through the dispatcher
// keeps that true (Note [Mutation]); a write the dispatcher does not see does not. After
// `u = torch.tanh(t @ t)`, `t.numpy()[:] = 0` (or a write to the array t was made from by
// torch.from_numpy) made the next remat of an evicted u compute it from the zeros, and the
// run went on with the wrong u and no word (found 2026-11-29); plain PyTorch keeps u as
// it was computed. Storages the program can write that way are *exposed*: external memory
// (is_external: a deleter neither ours nor PyTorch's default CPU allocator's, as for
// from_numpy, from_blob, DLPack imports and shared memory, which another process may
// write) and storages whose address was handed out for good (Note [Raw access] in
// dispatch_hook.cpp: numpy, __dlpack__, data_ptr() and storage() outside a raw scope).
// Both are pinned constants, never evicted; what is at stake is what ops computed from
// them. So a recorded op keeps a fingerprint (XXH3 of the bytes its view spans) of
// each exposed input, and before a remat of it runs the host takes them again
// (may_recompute). On a difference the engine abandons the materialization (Note [Refused
// remats] in eviction/engine.cpp), and the call that wanted the value raises a
// RuntimeError that names the op and what to do: the evicted result cannot be made again,
// and every later read of it raises the same. The cost falls on exposed inputs only: one
// fingerprint per recorded op that reads one and per remat of it. XXH3 ran at 18 GB/s
// here (std::hash at 6.7, memcpy at 4.5): `x * 1.0001` on a 6 MiB from_numpy x took 0.53
// ms an op against 0.19 ms before (1.1 ms with std::hash). An op whose exposed inputs span
// more than kMaxFingerprintBytes (one that reads all of a large from_numpy dataset, as
// `X[idx]` does) is not recorded instead: its outputs are constants (Note [Never recompute] in
// dispatch_hook.cpp), so a later write to X cannot reach them. A storage exported before
// lineage knows it, or an exposed one copied away (Note [Copy on write]), is exposed when
// an op reads it (exposed_unknown_, weak references, at most kMaxExposedUnknown: past that
// the oldest is forgotten, and a write to it goes unseen again).
// An exposed storage is never made recomputable by zero_ or fill_ (Note [Overwrite]): until
// 2026-11-29 `a = t.numpy(); t.zero_()` made t evictable, and once evicted, `a` read
// freed memory and t came back as zeros, without what the program wrote through `a`.
// Not covered: memory written while an op that reads it runs (another thread; a race
// without dtr too), and C++ code that writes through an address it did not get from the
// guard (Note [Raw access]).
constexpr size_t kMaxFingerprintBytes = size_t{64} << 20;
constexpr size_t kMaxExposedUnknown = 1024;
// Note [Iteration periods]: the storages of the first optimizer step kept as anchors.
constexpr size_t kMaxStepAnchors = 4096;
constexpr uint32_t kStaleAnchorSteps = 8;

// The tensor at `slot` of values[base...] (an argument or a return): a Stack, or an op
// record's arguments.
template <typename Values>
at::Tensor slot_tensor(Values& values, size_t base, TensorSlot slot) {
  const c10::IValue& v = values[base + slot.index];
  return slot.element < 0 ? v.toTensor() : v.toListRef()[slot.element].toTensor();
}

// A list element is set in a copy of the list, which other IValues (the caller's stack) may
// share, unless `owned`: the list is values' own (own_lists), and set where it is. Copying
// per element made recording an op over K tensors (torch.stack of a ParameterList) O(K^2).
void set_slot_tensor(std::vector<c10::IValue>& values, size_t base, TensorSlot slot, at::Tensor t,
                     bool owned = false) {
  c10::IValue& v = values[base + slot.index];
  if (slot.element < 0) {
    v = std::move(t);
    return;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> list = owned ? v.toTensorList() : v.toTensorList().copy();
    list.set(slot.element, std::move(t));
    if (!owned) v = std::move(list);
  } else {  // List[Optional[Tensor]]
    c10::List<c10::optional<at::Tensor>> list =
        owned ? v.toOptionalTensorList() : v.toOptionalTensorList().copy();
    list.set(slot.element, c10::optional<at::Tensor>(std::move(t)));
    if (!owned) v = std::move(list);
  }
}

// Gives each list in `values` that holds one of `slots` a copy of its own (see above).
void own_lists(std::vector<c10::IValue>& values, c10::ArrayRef<TensorSlot> slots) {
  int32_t last = -1;
  for (const TensorSlot& slot : slots) {
    if (slot.element < 0 || static_cast<int32_t>(slot.index) == last) continue;
    last = static_cast<int32_t>(slot.index);
    c10::IValue& v = values[slot.index];
    if (v.isTensorList())
      v = v.toTensorList().copy();
    else
      v = v.toOptionalTensorList().copy();
  }
}

// Note [Writes outside the dispatcher]: the bytes t's view spans in its storage, from its
// first element to its last.
std::string_view viewed_bytes(const at::Tensor& t) {
  if (!t.has_storage() || t.storage().data() == nullptr || t.numel() == 0) return {};
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * std::abs(t.stride(d));
  const size_t nbytes = t.storage().nbytes();
  const size_t item = t.element_size();
  const size_t begin = std::min(static_cast<size_t>(t.storage_offset()) * item, nbytes);
  const size_t end = std::min(begin + static_cast<size_t>(extent) * item, nbytes);
  return {static_cast<const char*>(t.storage().data()) + begin, end - begin};
}

uint64_t fingerprint(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

// The fingerprint of what the tensor at `slot` of an op record's arguments views.
template <typename Values>
uint64_t fingerprint_at(Values& values, TensorSlot slot) {
  return fingerprint(viewed_bytes(slot_tensor(values, 0, slot)));
}

// A private view of `t`'s storage with t's metadata, no autograd: what lineage keeps.
at::Tensor snapshot_of(const at::Tensor& t) {
  return at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(
      // No counter: nothing bumps or reads a snapshot's version (remats run below
      // ADInplaceOrView), and a counter is one more allocation per input.
      /*version_counter=*/c10::VariableVersion(c10::VariableVersion::DISABLED),
      /*allow_tensor_metadata_change=*/true));
}

// Calls f(tensor, element) for each defined CPU tensor with storage in `v`: a Tensor
// (element -1), a Tensor[] or a List[Optional[Tensor]] (its index); and
// other_layout(tensor) for each CPU tensor without storage of a layout other than strided
// (Note [Sparse tensors]).
struct IgnoreOtherLayouts {
  void operator()(const at::Tensor&) const {}
};
template <typename F, typename G = IgnoreOtherLayouts>
void for_each_cpu_tensor(const c10::IValue& v, F&& f, G&& other_layout = G{}) {
  auto take = [&](const at::Tensor& t, int16_t element) {
    if (!t.defined() || t.device().type() != c10::DeviceType::CPU) return;
    if (t.has_storage())
      f(t, element);
    else if (t.layout() != c10::kStrided)
      other_layout(t);
  };
  if (v.isTensor()) {
    take(v.toTensor(), -1);
  } else if (v.isTensorList()) {
    const auto list = v.toTensorList();
    for (size_t j = 0; j < list.size(); ++j) take(list.get(j), static_cast<int16_t>(j));
  } else if (v.isList()) {
    const auto& list = v.toListRef();
    for (size_t j = 0; j < list.size(); ++j)
      if (list[j].isTensor()) take(list[j].toTensor(), static_cast<int16_t>(j));
  }
}

// Whether writing all of `t` writes every byte of its storage: dense without overlap, in
// any order of dimensions (channels-last, transposed), from the storage's start to its end.
bool covers_storage(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() && t.storage_offset() == 0 &&
         t.numel() * static_cast<int64_t>(t.element_size()) ==
             static_cast<int64_t>(t.storage().nbytes());
}

// Note [Packed masks]: packs what bernoulli_ wrote in `t` into `bits`; returns the
// nanoseconds packing took, or Engine::kSameCost (and no bits) where `t` is no mask over
// its whole storage, is too small to be worth it, or the allocator had no room for the
// bits.
uint64_t pack_written_mask(const at::Tensor& t, size_t min_bytes, c10::DataPtr& bits,
                           uint64_t& one) {
  const void* data = t.storage().data();
  const size_t n = static_cast<size_t>(t.numel());
  if (!t.device().is_cpu() || !covers_storage(t) || data == nullptr ||
      t.storage().nbytes() < min_bytes)
    return Engine::kSameCost;
  try {
    bits = c10::GetCPUAllocator()->allocate(packed_mask_bytes(n));
  } catch (const c10::Error&) {
    return Engine::kSameCost;  // replayed from its generator instead
  }
  const auto start = std::chrono::steady_clock::now();
  const bool packed = pack_mask(data, n, static_cast<size_t>(t.element_size()),
                                static_cast<uint8_t*>(bits.get()), &one);
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  if (!packed) {
    bits.clear();
    return Engine::kSameCost;
  }
  return ns > 0 ? static_cast<uint64_t>(ns) : 1;
}

// What makes two runs of an op cost alike (Note [Noisy op times] in eviction/op_costs.cpp):
// the operator (its schema's address identifies it for the process) and, for each
// argument, a tensor's dtype, layout, sizes and strides, or a scalar's value; lists
// element by element. `args` are the recorded snapshots, which keep the metadata.
void hash_arg(size_t& h, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      h = c10::hash_combine(h, 0x9e37u);
      return;
    }
    h = c10::hash_combine(h, static_cast<size_t>(t.scalar_type()));
    h = c10::hash_combine(h, static_cast<size_t>(t.layout()));
    for (const int64_t d : t.sizes()) h = c10::hash_combine(h, static_cast<size_t>(d));
    if (t.layout() == c10::kStrided)
      for (const int64_t d : t.strides()) h = c10::hash_combine(h, static_cast<size_t>(d));
  } else if (v.isList()) {
    h = c10::hash_combine(h, v.toListRef().size());
    for (const c10::IValue& e : v.toListRef()) hash_arg(h, e);
  } else if (v.isInt()) {
    h = c10::hash_combine(h, static_cast<size_t>(v.toInt()));
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    h = c10::hash_combine(h, static_cast<size_t>(bits));
  } else if (v.isBool()) {
    h = c10::hash_combine(h, v.toBool() ? 3u : 2u);
  } else if (v.isNone()) {
    h = c10::hash_combine(h, 1u);
  } else {
    h = c10::hash_combine(h, 7u);  // a generator, device, string...: alike enough
  }
}

uint64_t op_signature(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  size_t h = std::hash<const void*>()(&op.schema());
  for (const c10::IValue& v : args) hash_arg(h, v);
  return h;
}

std::atomic<Lineage*> lineage_ptr{nullptr};
thread_local bool recording_on = true;

}  // namespace

Lineage* the_lineage() { return lineage_ptr.load(std::memory_order_acquire); }

Lineage::Lineage(const Config& config, CachingAllocator& allocator, MemoryHistory* history,
                 std::shared_ptr<const PlanHints> plan)
    : config_(config),
      allocator_(allocator),
      history_(history),
      median_costs_(parse_op_cost(config.op_cost) == OpCostMode::median),
      thrash_watch_(config.max_overhead, config.policy, config.dead_first, config.remake_factor),
      thrash_action_(parse_thrash_action(config.on_thrash)),
      plan_(std::move(plan)) {
  EngineConfig ec;
  ec.search = parse_search_mode(config.search);
  ec.sample_size = config.sample;
  ec.dead_first = config.dead_first;
  ec.dead_first_ratio = config.dead_first_ratio;
  ec.keep_near_large = config.keep_near_large;
  ec.relax_locks = config.relax_locks;
  ec.seed = config.seed;
  ec.debug = config.debug;
  HeuristicParams params;
  params.seed = config.seed;
  params.dead_lineage_factor = config.dead_lineage_factor;
  params.remake_factor = config.remake_factor;
  EngineMemory memory;
  memory.allocator = &allocator;
  memory.engine_allocates = false;
  // Note [Trial by replay] in eviction/heuristics/auto_heuristic.cpp: the first steps are
  // recorded for `auto`'s replays where a budget is set from the start, or from a change
  // of budget on (Note [Trial trace from a budget change] in recording.cpp).
  trial_by_replay_ =
      config.policy == "auto" && parse_trial_mode(config.trial) == TrialMode::replay && !plan_;
  budget_bytes_ = allocator.config().budget_bytes;
  recording_ = std::make_unique<Recording>(config_, allocator, clock_,
                                           trial_by_replay_ && budget_bytes_ != kUnlimitedBytes);
  if (trial_by_replay_)
    params.trial_replay = [this](const std::vector<std::string>& policies) {
      // Called from end_period (under the lock), after its STEP went into the trace.
      return recording_->replay_trial(policies, allocator_.config().budget_bytes);
    };
  budget_changed(allocator.config().budget_bytes);
  if (config.budget.kind == Budget::Kind::ratio) ratio_budget_ = config.budget.ratio;
  EngineHooks* hooks = recording_->engine_hooks(this);
  if (plan_) {  // Note [Warm start in PyTorch]
    guide_ = std::make_unique<PlanGuide>(*plan_, hooks);
    hooks = guide_.get();
  }
  engine_ = std::make_unique<Engine>(ec, builtin_heuristics().make(config.policy, params),
                                     clock_, hooks, memory);
  if (guide_) guide_->bind(*engine_);
  recording_->bind(*engine_);
  our_deleter_ = torch_compat::cpu_allocator()->raw_deleter();
  // The engine made itself the allocator's callback; requests must take the engine lock
  // and collect dead storages first, so this object stands in front of it.
  allocator.set_eviction_callback(this);
}

// --- tables --------------------------------------------------------------------------------

StorageId Lineage::lookup(const c10::StorageImpl* impl) const {
  // A StorageImpl we hold a weak reference to keeps its address: a live one found here
  // is the one recorded (c10 frees the memory only when the weak count drops too).
  auto it = by_impl_.find(impl);
  return it == by_impl_.end() ? kNoId : it->second;
}

void Lineage::sync_tables() {
  if (storages_.size() < engine_->num_storages()) storages_.resize(engine_->num_storages());
  while (ops_.size() < engine_->num_ops()) ops_.emplace_back();
}

void Lineage::adopt(StorageId s, const c10::weak_intrusive_ptr<c10::StorageImpl>& impl,
                    TensorId current) {
  StorageRec& rec = storages_[s];
  rec = StorageRec{};  // a new engine storage, maybe with a retired one's id
  rec.impl = impl;
  rec.current = current;
  by_impl_[impl._unsafe_get_target()] = s;
  active_.push_back(s);
  alive_.push_back(s);
  set_block_owner(s);
  if (history_) {
    // A snapshot's categories: a constant (a parameter, an input, a buffer) or an op's output.
    auto strong = impl.lock();
    const bool constant = !ops_[engine_->op_of(current)].op.has_value();
    if (strong && strong->data())
      history_->set_category(reinterpret_cast<uintptr_t>(strong->data()),
                             constant ? MemoryCategory::parameter : MemoryCategory::activation);
  }
}

void Lineage::set_block_owner(StorageId s) {
  auto impl = storages_[s].impl.lock();
  if (impl && impl->data())
    allocator_.set_owner(torch_compat::storage_address(*impl), Engine::owner_of(s));
}

bool Lineage::is_ours(const c10::StorageImpl& impl) const {
  return impl.data_ptr().get_deleter() == our_deleter_;
}

// Note [Writes outside the dispatcher]: a list of weak references, so a storage that died
// is not taken for a new one at its address; the dead go first when it is full.
void Lineage::remember_exposed(const c10::intrusive_ptr<c10::StorageImpl>& impl) {
  if (exposed_unknown_.size() >= kMaxExposedUnknown) {
    exposed_unknown_.erase(std::remove_if(exposed_unknown_.begin(), exposed_unknown_.end(),
                                          [](const auto& w) { return w.expired(); }),
                           exposed_unknown_.end());
    if (exposed_unknown_.size() >= kMaxExposedUnknown)
      exposed_unknown_.erase(exposed_unknown_.begin());
  }
  exposed_unknown_.emplace_back(impl);
}

// Note [Writes outside the dispatcher]
bool Lineage::is_external(const c10::StorageImpl& impl) const {
  if (impl.data() == nullptr || impl.nbytes() == 0) return false;
  const c10::DeleterFnPtr deleter = impl.data_ptr().get_deleter();
  return deleter != our_deleter_ && deleter != c10::GetDefaultCPUAllocator()->raw_deleter();
}

TensorId Lineage::register_constant(const at::Tensor& t) {
  TensorId id = kNoId;
  const Status status = engine_->record_constant(t.storage().nbytes(), id);
  DTR_CHECK(status.ok(), "recording a constant cannot fail");
  sync_tables();
  const StorageId s = engine_->storage_of(id);
  adopt(s, t.storage().getWeakStorageImpl(), id);
  // Note [Writes outside the dispatcher]
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const auto known =
      std::find_if(exposed_unknown_.begin(), exposed_unknown_.end(),
                   [&](const auto& w) { return w._unsafe_get_target() == impl && !w.expired(); });
  const bool was_exposed = known != exposed_unknown_.end();
  if (was_exposed) exposed_unknown_.erase(known);
  storages_[s].exposed = was_exposed || is_external(*impl);
  any_exposed_ = any_exposed_ || storages_[s].exposed;
  // Note [Constants where they were allocated] in recording.cpp
  const uint64_t allocation =
      recording_->places_constants() && is_ours(*impl)
          ? allocator_.allocation_number(torch_compat::storage_address(*impl))
          : 0;
  recording_->constant(id, t.storage().nbytes(), allocation);
  // Note [Warm start in PyTorch]: the op's inputs are not locked yet.
  if (guide_) guide_->end_op(*engine_, engine_->op_of(id));
  return id;
}

TensorId Lineage::input_tensor(const at::Tensor& t, bool register_unknown) {
  const StorageId s = lookup(t.storage().unsafeGetStorageImpl());
  if (s != kNoId) return storages_[s].current;
  return register_unknown ? register_constant(t) : kNoId;
}

bool Lineage::has_readers(StorageId s) {
  // Entries of ops whose lineage was dropped are pruned here, so a parameter read by every
  // step does not accumulate them.
  auto& readers = storages_[s].readers;
  readers.erase(std::remove_if(readers.begin(), readers.end(),
                               [&](const auto& r) { return ops_[r.first].args.empty(); }),
                readers.end());
  return !readers.empty();
}

// Whether some op that read S made a storage other than S. An in-place op recorded as a
// new version of S (Note [Mutation]) reads S's previous version only to make S: such a
// chain matters for rematerializing S, and nothing else.
bool Lineage::reads_reach_beyond(StorageId s) const {
  for (const auto& [op, k] : storages_[s].readers)
    for (TensorId out : engine_->op_outputs(op))
      if (engine_->storage_of(out) != s) return true;
  return false;
}

// has_readers(s) after a full collect if ops were recorded since the last one: readers
// whose outputs are all dead and unneeded need no copy, and the collect drops them.
bool Lineage::has_live_readers(StorageId s) {
  if (has_readers(s) && full_collect_ops_ != ops_recorded_) collect(/*full=*/true);
  return has_readers(s);
}

// The same for readers that made a storage other than S, the ones that need S's value as
// it is now when S becomes a new version of itself (Note [Mutation]). The full collect
// runs only if there are such readers: before each of an LSTM cell's in-place writes to
// its gates, has_live_readers's collects were 3.6% of the chunked LSTM script's main
// thread with no budget (perf), 0.7% now.
bool Lineage::has_readers_beyond(StorageId s) {
  if (!has_readers(s) || !reads_reach_beyond(s)) return false;
  if (full_collect_ops_ != ops_recorded_) collect(/*full=*/true);
  return has_readers(s) && reads_reach_beyond(s);
}

// --- the fallback's side -----------------------------------------------------------------

namespace {
// Note [Out-of-memory within a remat]: the remat this thread runs, and the program's op.
thread_local OpId remat_here = kNoId;
thread_local const c10::FunctionSchema* program_op_here = nullptr;
}  // namespace

void Lineage::before_op(const c10::OperatorHandle& op, const OpInfo& info,
                        torch::jit::Stack& stack, PendingOp& pending) {
  program_op_here = &op.schema();  // Note [Out-of-memory within a remat]
  const size_t base = stack.size() - info.num_args;
  std::vector<at::Tensor>& tensors = pending.tensors;
  // The op runs without these references, as it would without the library.
  struct DropOnReturn {
    std::vector<at::Tensor>& tensors;
    ~DropOnReturn() { tensors.clear(); }
  } drop_on_return{tensors};
  std::vector<std::pair<at::Tensor, bool>> other_layouts;  // Note [Sparse tensors]
  for (uint16_t i = 0; i < info.num_args; ++i) {
    for_each_cpu_tensor(
        stack[base + i],
        [&](const at::Tensor& t, int16_t element) {
          if (t.unsafeGetTensorImpl()->is_wrapped_number()) return;  // Note [Wrapped numbers]
          pending.input_slots.push_back(TensorSlot{i, element});
          tensors.push_back(t);
        },
        [&](const at::Tensor& t) {
          const bool written =
              std::find(info.write_args.begin(), info.write_args.end(), i) != info.write_args.end();
          other_layouts.emplace_back(t, written);
        });
  }

  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!thrash_error_.empty()) throw_status(Status::thrashing());  // on_thrash:raise
  if (!ratio_error_.empty()) {                                    // Note [Ratio budgets]
    const std::string message = std::move(ratio_error_);
    ratio_error_.clear();
    allocator_.count_oom();
    torch_compat::throw_out_of_memory(message);
  }
  thrash_watch_.mark_op(engine_->stats());                        // Note [Runaway cascades]
  if (!other_layouts.empty()) {
    pending.record = false;
    for (const auto& [t, written] : other_layouts) hold_inner_tensors(t, written);
  }
  // Note [Thread-order results] in dispatch_hook.cpp
  if (pending.record && info.thread_order_arg >= 0 &&
      stack[base + info.thread_order_arg].toBool() && at::get_num_threads() > 1 &&
      !at::globalContext().deterministicAlgorithms())
    pending.record = false;
  // Tracing: what died since the last op is released before this op allocates, as its
  // memory would be without lineage (kOpsBetweenDeadScans), and a dead pinned storage is
  // discarded as soon as lineage lets it go (Note [Discards in a trace]). Under a budget
  // the deaths only go into the trace (Note [Tracing under a budget] in collector.cpp).
  if (recording_->tracing()) {
    if (!scan_newest_.load(std::memory_order_relaxed)) {
      // Note [Deaths in the trial's trace] in collector.cpp
      const bool every = !config_.trace.empty() || scan_earned(trace_scan_ops_);
      trace_deaths(every ? SIZE_MAX : kNewestScanned);
    } else {
      scan_for_dead();
      if (pinned_dead_bytes_ >= kSmallPinnedBytes ||
          (holds_dead_constants_ && versions_since_collect_ > 0))
        collect(/*full=*/true);
    }
  }
  for (const at::Tensor& t : tensors) pending.inputs.push_back(input_tensor(t, pending.record));
  // Note [Writes outside the dispatcher]: the bytes of each exposed input as the op reads
  // them (it writes none: a written exposed storage is pinned, so the op is not recorded,
  // Note [Mutation]), or no record where there are too many to fingerprint.
  for (size_t k = 0; k < tensors.size() && pending.record && any_exposed_; ++k) {
    if (pending.inputs[k] == kNoId || !storages_[engine_->storage_of(pending.inputs[k])].exposed)
      continue;
    const std::string_view bytes = viewed_bytes(tensors[k]);
    if (bytes.size() > kMaxFingerprintBytes)
      pending.record = false;
    else
      pending.fingerprints.emplace_back(pending.input_slots[k], fingerprint(bytes));
  }
  // Note [Overwrite]: a storage the op overwrites whole, that no lineage reads, needs
  // memory but not its old value: it is not refilled.
  int32_t overwritten = -1;
  if (pending.record && info.overwrites) {
    for (size_t k = 0; k < pending.input_slots.size(); ++k) {
      const at::Tensor& t = tensors[k];
      const StorageId s = lookup(t.storage().unsafeGetStorageImpl());
      // A pinned storage (a gradient, a constant) becomes recomputable only when the op
      // reads nothing else (zero_, fill_ with a number): its remat costs a memset. Never
      // an exposed one (Note [Writes outside the dispatcher]): its address is handed out,
      // so it must stay, and what the program writes there is no op's to remake. Nor one
      // whose memory is not ours (torch.UntypedStorage(n), Note [Storages Python
      // allocates]): evicting it would free no budget.
      const c10::StorageImpl& impl = *t.storage().unsafeGetStorageImpl();
      if (pending.input_slots[k].index != info.write_args[0] || s == kNoId ||
          (engine_->is_pinned(s) && pending.inputs.size() > 1) || !covers_storage(t) ||
          storages_[s].exposed || (impl.data() && !is_ours(impl)))
        continue;
      // Note [Pinned frontiers]: a pinned storage's readers may be live storages left
      // evictable (a momentum buffer cloned from a gradient); pinning them first lets the
      // overwrite make it recomputable, as it does where they were pinned before.
      if (engine_->is_pinned(s) && has_readers_beyond(s)) {
        pin_live_descendants(s);
        collect(/*full=*/true);
      }
      if (!has_readers_beyond(s)) overwritten = static_cast<int32_t>(k);
    }
  }
  std::vector<TensorId>& to_lock = pending.locked;  // kept only once lock_tensors succeeds
  for (size_t k = 0; k < pending.inputs.size(); ++k)
    if (pending.inputs[k] != kNoId && static_cast<int32_t>(k) != overwritten)
      to_lock.push_back(pending.inputs[k]);
  Status status = Status::success();
  try {
    status = engine_->lock_tensors(to_lock);
  } catch (...) {     // a remat's kernel ran out of memory: Note [Host exceptions] in engine.cpp
    to_lock.clear();  // lock_tensors undid its locks
    throw;
  }
  if (!status.ok()) {
    to_lock.clear();  // lock_tensors undid its locks
    throw_status(status);
  }
  if (info.foreign)  // Note [Moving storages]
    for (const at::Tensor& t : tensors)
      if (t.has_storage() && t.storage().data())
        allocator_.set_unmovable(
            torch_compat::storage_address(*t.storage().unsafeGetStorageImpl()));
  if (overwritten >= 0) {
    c10::StorageImpl* impl = tensors[overwritten].storage().unsafeGetStorageImpl();
    if (!impl->data() && impl->nbytes() > 0)
      impl->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(impl->nbytes()));
    pending.target = overwritten;
    pending.target_nbytes = impl->nbytes();
    pending.overwrite = true;
    pending.orphan = lookup(impl);
    pending.unlocked_target = impl;  // Note [Moving storages]
    unlocked_targets_.push_back(impl);
  }

  // Note [Mutation]; Note [Batch norm] in dispatch_hook.cpp.
  const bool batch_norm_training = info.batch_norm && stack[base + 5].isBool() &&
                                   stack[base + 5].toBool();
  static const std::vector<uint16_t> kRunningStats = {3, 4};
  for (uint16_t w : batch_norm_training ? kRunningStats : info.write_args) {
    for (size_t k = 0; k < pending.input_slots.size(); ++k) {
      if (pending.input_slots[k].index != w || static_cast<int32_t>(k) == overwritten) continue;
      pending.written.push_back(tensors[k]);  // Note [Grown storages]
      if (step_open_) note_step_write(tensors[k].storage().unsafeGetStorageImpl());
      StorageId s = lookup(tensors[k].storage().unsafeGetStorageImpl());
      if (s == kNoId) continue;  // no lineage reads it
      // Note [Parameters]
      if (!engine_->is_pinned(s) && tensors[k].requires_grad() && tensors[k].is_leaf()) {
        const Status pinned = pin_tensor(storages_[s].current);
        DTR_CHECK(pinned.ok(), "pinning a locked storage cannot fail");
      }
      const bool recordable = pending.record && info.in_place && !info.batch_norm;
      const bool overwrite = recordable && info.overwrites && covers_storage(tensors[k]);
      // Note [Mutation]: a new version of S needs no copy for readers that only made S.
      const bool new_version = recordable && !overwrite && !engine_->is_pinned(s) &&
                               storages_[s].versions < kMaxVersions;
      bool readers = new_version ? has_readers_beyond(s) : has_live_readers(s);
      if (readers && engine_->is_pinned(s)) {
        // Note [Pinned writes]
        pin_live_descendants(s);
        collect(/*full=*/true);
        readers = has_readers(s);
      }
      if (recordable) {
        pending.target = static_cast<int32_t>(k);
        pending.target_nbytes = tensors[k].storage().nbytes();
      }
      // After a copy, the user's storage is unknown to the engine: read again, it becomes
      // a constant, unless this op is recorded and makes it its output.
      if (readers) copy_on_write(s);
      if (engine_->is_pinned(s)) {
        recording_->write_pinned(storages_[s].current);  // Note [Pins when material], sim
        if (recordable) pending.record = false;
      } else if (overwrite) {
        pending.overwrite = true;
        if (!readers) pending.orphan = s;
      } else if (readers) {
        // Note [Chains through copies]
        const uint32_t writes = storages_[s].copied_writes + storages_[s].versions + 1;
        if (recordable && writes <= kMaxChainWrites) {
          pending.new_target_storage = true;
          pending.chain_writes = writes;
        } else if (recordable) {
          pending.record = false;  // copied away: the new value is a constant when read
        }
      } else if (!recordable || storages_[s].versions >= kMaxVersions) {
        const Status pinned = pin_tensor(storages_[s].current);
        DTR_CHECK(pinned.ok(), "pinning a locked storage cannot fail");
        if (recordable) pending.record = false;
      }
    }
  }

  if (batch_norm_training) {
    // The running stats are locked, but not inputs of the recorded call, so their
    // fingerprints go too (exposed stats, as after model.share_memory(), got one above): a
    // remat does not read them, and would look for them in its arguments, where they are
    // None (Note [Writes outside the dispatcher]).
    auto running_stat = [](TensorSlot slot) { return slot.index == 3 || slot.index == 4; };
    pending.fingerprints.erase(
        std::remove_if(pending.fingerprints.begin(), pending.fingerprints.end(),
                       [&](const auto& f) { return running_stat(f.first); }),
        pending.fingerprints.end());
    for (size_t k = pending.input_slots.size(); k-- > 0;) {
      if (!running_stat(pending.input_slots[k])) continue;
      pending.input_slots.erase(pending.input_slots.begin() + static_cast<std::ptrdiff_t>(k));
      pending.inputs.erase(pending.inputs.begin() + static_cast<std::ptrdiff_t>(k));
      tensors.erase(tensors.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  if (!pending.record) return;
  pending.args.assign(stack.begin() + static_cast<std::ptrdiff_t>(base), stack.end());
  own_lists(pending.args, pending.input_slots);
  for (size_t k = 0; k < pending.input_slots.size(); ++k) {
    at::Tensor snap = snapshot_of(tensors[k]);
    for (const auto& [from, to] : cow_)
      if (tensors[k].storage().unsafeGetStorageImpl() == from)
        snap.unsafeGetTensorImpl()->set_storage_keep_dtype(c10::Storage(to));
    set_slot_tensor(pending.args, 0, pending.input_slots[k], std::move(snap), /*owned=*/true);
  }
  if (batch_norm_training) {
    // Note [Batch norm] (dispatch_hook.cpp): a training-mode remat gets no running stats.
    pending.args[3] = c10::IValue();
    pending.args[4] = c10::IValue();
  }
  // Note [Seeded ops] (dispatch_hook.cpp): the generator's state before the op draws.
  if (info.generator_arg >= 0) {
    if (info.replay_op)  // Note [Seeded factories]: its overload's argument, None as called
      pending.args.insert(pending.args.begin() + info.generator_arg, c10::IValue());
    pending.args[info.generator_arg] =
        torch_compat::snapshot_generator(pending.args[info.generator_arg]);
  }
}

// A new mark for a walk over storages: marks_[s] == the value returned means "marked in
// this walk"; nothing is cleared, so a walk costs what it visits, not every storage ever.
Mark Lineage::begin_marks() {
  if (marks_.size() < storages_.size()) marks_.resize(storages_.size(), 0);
  return ++mark_epoch_;
}

// The storages made by ops that read some version of S and that lineage may still evict
// (not pinned, not discarded): what a write to S or S's discard would cut off.
template <typename F>
void Lineage::for_each_unpinned_child(StorageId s, F&& f) const {
  for (TensorId t : engine_->storage_tensors(s)) {
    for (TensorId c : engine_->tensor_children(t)) {
      const StorageId cs = engine_->storage_of(c);
      if (!engine_->is_pinned(cs) && !storages_[cs].discarded) f(cs);
    }
  }
}

// Note [Pinned writes]
// ~~~~~~~~~~~~~~~~~~~~
// A pinned storage that lineage read is written: in a training step, a parameter updated
// by the optimizer, whose old value the forward and backward passes read. By then the
// storages that could need that old value are the live ones computed from it (the
// gradients: the activations are dead). Pinning those (refilled first, while the old
// value is still there) and collecting leaves no lineage that needs it, so no copy is
// made (Note [Copy on write] is the fallback): gradients are live until zero_grad anyway,
// while a copy would add a parameter's size per parameter until the step ends.
// They are refilled smallest first: each one pinned holds its bytes while the next is
// rematerialized. In discovery order the LSTM LM at 0.5x (policy dtr_eq) refilled its
// 15.6 MiB logits first, then ran out of memory rematerializing a gradient through three
// more storages of that size (2 runs of 3 failed; 4 of 4 passed smallest first;
// tests/torch/test_pinned_writes.py).
//
// Note [Pinned frontiers]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Only the live storages the old value reaches through dead storages (the frontier) need
// it: a live storage computed from one of them is remade from that one once it is pinned.
// Pinning every live descendant held what a loop keeps across the step: a helper's probe
// (2026-12-03) held its embeddings (256 KiB) and four distance matrices computed from
// them (7 MiB) at the optimizer step, and ran out of memory at 0.7 of its peak where a
// `del` of them before the step trained. So the frontier is pinned, and the storages
// beyond it stay evictable, unless the frontier storages they are computed from weigh
// more than they do: a frontier storage that dies first stays as a dead constant while
// they need it (Note [Dead constants], Note [Small frontiers]), so a big activation with a
// small sum of it held would be kept in place of the sum. The walk goes on past a live
// storage that has older versions: readers of those read what its pin does not keep.
// A storage overwritten whole (zero_grad's zero_, Note [Overwrite]) pins its frontier
// before it decides: a momentum buffer cloned from a gradient, left evictable at the
// step, made the gradient's zero_ keep it pinned (its reader was live), where pinning the
// buffer first lets the zeroed gradient be recomputable (the save pattern of
// patterns.py at 0.7 ran out of memory with 1 MiB more pinned; now 5 MiB less than
// before this note at the next step's forward pass, as every zeroed gradient whose buffer
// read it is let go).
void Lineage::pin_live_descendants(StorageId root) {
  // One the program let go but no scan has found yet is dead too: pinning it would refill
  // what the collect after this discards, and a trace has its RELEASE already (Note
  // [Tracing under a budget] in collector.cpp).
  auto live = [&](StorageId s) { return !storages_[s].dead && !found_dead(s); };
  // Note [Pinned frontiers]: the live descendants reached through dead storages only, and
  // through live ones with older versions (readers of those read what a pin keeps not).
  std::vector<StorageId> frontier;
  const Mark frontier_mark = begin_marks();
  {
    std::vector<StorageId> stack{root};
    marks_[root] = frontier_mark;
    while (!stack.empty()) {
      const StorageId s = stack.back();
      stack.pop_back();
      for_each_unpinned_child(s, [&](StorageId cs) {
        if (marks_[cs] == frontier_mark) return;
        marks_[cs] = frontier_mark;
        const bool is_live = live(cs);
        if (is_live) frontier.push_back(cs);
        if (!is_live || engine_->storage_tensors(cs).size() > 1) stack.push_back(cs);
      });
    }
  }
  std::vector<StorageId> sorted_frontier(frontier);
  std::sort(sorted_frontier.begin(), sorted_frontier.end());
  auto is_frontier = [&](StorageId s) {
    return std::binary_search(sorted_frontier.begin(), sorted_frontier.end(), s);
  };
  // The live storages beyond it: computable from the frontier once it is pinned.
  std::vector<StorageId> beyond;
  uint64_t beyond_bytes = 0, holding_bytes = 0;
  const Mark beyond_mark = begin_marks();
  for (StorageId f : frontier) {
    const Mark seen = begin_marks();
    std::vector<StorageId> stack{f};
    marks_[f] = seen;
    bool holds = false;
    while (!stack.empty()) {
      const StorageId s = stack.back();
      stack.pop_back();
      for_each_unpinned_child(s, [&](StorageId cs) {
        if (marks_[cs] == seen || marks_[cs] == beyond_mark || is_frontier(cs)) {
          holds = holds || marks_[cs] == beyond_mark;
          return;
        }
        if (live(cs)) {
          holds = true;
          beyond.push_back(cs);
          beyond_bytes += engine_->storage_size(cs);
          marks_[cs] = beyond_mark;
        } else {
          marks_[cs] = seen;
        }
        stack.push_back(cs);
      });
    }
    if (holds) holding_bytes += engine_->storage_size(f);
  }
  std::vector<TensorId> to_pin;
  for (StorageId f : frontier) to_pin.push_back(storages_[f].current);
  if (holding_bytes > beyond_bytes)
    for (StorageId b : beyond) to_pin.push_back(storages_[b].current);
  std::stable_sort(to_pin.begin(), to_pin.end(), [&](TensorId a, TensorId b) {
    return engine_->storage_size(engine_->storage_of(a)) <
           engine_->storage_size(engine_->storage_of(b));
  });
  for (TensorId t : to_pin) {
    const Status status = pin_tensor(t);
    if (!status.ok()) throw_status(status);
  }
}

// Note [Dead constants]
// ~~~~~~~~~~~~~~~~~~~~~
// A pinned storage (a constant: an input batch, an old parameter value) that has died is
// kept as long as some live storage may be rematerialized through it. Usually that ends
// soon: a step's input is dead only once the next step starts, when the optimizer step has
// pinned the gradients (Note [Pinned writes]) and zero_grad overwritten them (Note
// [Overwrite]). Gradient accumulation breaks that: each micro-batch's backward adds to the
// gradients in place (Note [Mutation]), so every gradient's versions reach back through
// each earlier micro-batch's backward pass to its input. The dead inputs stayed pinned
// until zero_grad (6.02 of the 22.09 MiB pinned when 4 micro-batches of
// tests/torch/scripts/patterns.py ran out of memory at 0.8 of the baseline peak), and a
// gradient evicted in the next forward pass came back through the previous backward pass:
// every policy thrashed or ran out of memory at 0.5-0.9 in the simulator. So a full collect
// that finds a dead constant of kSmallPinnedBytes or more still needed pins the live
// storages that were written in place as new versions (Note [Mutation]) and reach it
// through dead storages only, where their current version is material (a pin costs no
// memory then), and marks again: the constant and the dead storages between are discarded
// once nothing else reaches it. An evicted one keeps its lineage until it is refilled (the
// next micro-batch's in-place add does that) and a later collect pins it. So does one a
// remat is refilling, whose storage is material with an older version only: a full collect
// can run inside a remat (an eviction request for its outputs), and pinning the storage
// there ran a second remat of it inside the first and then discarded the lineage the first
// was following, which it met as an internal error (a packed GRU's gradient at 0.8 of its
// peak; tests/torch/test_remat.py, gru_packed). Small dead constants (Note [Small
// storages]) are left alone: they cost next to nothing, and a first version that cut at
// them too ran resnet18 out of memory at 0.5x of its peak with 99 MiB pinned (what it had
// pinned was not looked into). Only storages written in place are cut loose: their lineage
// grows with every write, while a storage computed once from the constant has a fixed
// lineage, and pinning it may cost more than the constant frees (`x = batch.float() / 255`
// would pin the float input, four times the dead uint8 batch). On the accumulate pattern,
// cutting those too halved the remats at 0.75 (5.7 s against 7.3-8.1 s) but did not lower
// its floor. The walk stops at live storages: pinning the nearest ones is enough to free
// the constant.
//
// Note [Small frontiers]
// ~~~~~~~~~~~~~~~~~~~~~~
// The rule above kept every constant a storage computed once reaches, however little that
// storage weighs. A dropout mask drawn under no_grad is such a constant (a draw outside
// autograd is opaque: Note [Seeded factories] in dispatch_hook.cpp): `h = F.dropout(x,
// training=True); y = h @ w; del h` kept the 2 MiB mask as long as y lived, where PyTorch
// frees it with h (7.0 MiB against 5.0 MiB). A reentrant torch.utils.checkpoint runs its
// forward so, and a helper's probe of one (2026-12-03: three checkpointed blocks with
// dropout, Adam) ran out of memory at 0.7 of its peak with 6 MiB of dead masks pinned,
// where the non-reentrant form trains at 0.6. So each dead constant also gets a walk of its
// own, and where the live storages it reaches through dead storages only (its frontier)
// are all material and weigh no more than it, they are pinned too: the constant is freed,
// and the bytes that cannot be evicted do not grow. The float input of `x =
// batch.float() / 255`, four times the dead uint8 batch, still keeps the batch; so does a
// frontier with an evicted storage (it would have to be refilled first).
//
// Note [Small dead constants in bulk]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Small dead constants are left alone one by one, but not in bulk. A gradient accumulated
// with no zero_grad (`(x @ w).relu().sum().backward()` each step, an SGD step every 100;
// Fisher or saliency sums over a dataset are written so) keeps each step's input and its
// ReLU mask gradient, 4 KiB each and pinned as results under min_evictable, for as long as
// its chain of versions reaches back (Note [Chains through copies]: 256 writes): on a
// 64x64 weight, 8 KiB more pinned a step. Under a budget of the plain run's peak, and of
// twice it, it ran out of memory within 10 steps ("pinned 80.01 KiB, evictable 0 B"), and
// a replay of its trace ran out at 1.0 of its own baseline. So where the small dead
// constants a full collect keeps come to kSmallPinnedBytes or more, each gets a short walk
// through dead storages to the live ones it reaches (kBulkWalk storages reached at most,
// and no more in all than lineage holds; each collect starts at another constant). Where
// that is one storage only, written in place as new versions and material (what the first
// walk above pins for a large constant), the constant is that storage's alone: pinning it
// frees the constant, as nothing else reaches it. A storage whose own constants come to
// its size or more is pinned: what cannot be evicted does not grow, as in Note [Small
// frontiers]. The 16 KiB gradient above is pinned once two steps' constants are held, and
// its chain goes at that collect; a gradient of MiBs is not pinned for KiBs of batch-norm
// statistics, nor for a constant other live storages reach too. Walks that meet more, or
// go past their limit, count for nothing.
constexpr size_t kBulkWalk = 64;

// Returns whether it pinned anything (then the caller's marks are stale).
bool Lineage::cut_at_dead_constants(Mark needed_mark) {
  std::vector<StorageId> constants, small;
  uint64_t small_bytes = 0;
  for (StorageId s : active_) {
    const StorageRec& rec = storages_[s];
    if (!rec.dead || rec.discarded || marks_[s] != needed_mark || !engine_->is_pinned(s)) continue;
    const uint64_t size = engine_->storage_size(s);
    if (size >= kSmallPinnedBytes) {
      constants.push_back(s);
    } else if (size > 0) {
      small.push_back(s);
      small_bytes += size;
    }
  }
  // Note [Small dead constants in bulk]; not a reason for the collects that
  // holds_dead_constants_ brings on (a collect before each op after a write while
  // tracing): those made a 1200-layer MLP's traced run 3 times as long (16.2 s, 5.1 s).
  const bool bulk = small_bytes >= kSmallPinnedBytes;
  holds_dead_constants_ = !constants.empty();
  if (constants.empty() && !bulk) return false;
  // The walks' marks replace the caller's; each one is put back after, the first saved
  // last.
  std::vector<std::pair<StorageId, Mark>> saved;
  auto mark = [&](StorageId s, Mark m) {
    saved.emplace_back(s, marks_[s]);
    marks_[s] = m;
  };
  // Walks from `roots` through the dead storages they reach; `at_live` sees each live
  // storage reached (the walk stops there) and may end the walk by returning false. Each
  // storage it reaches takes one from `left`, and it ends where none is left. Returns
  // whether it saw all it reaches.
  size_t unlimited = SIZE_MAX;
  auto walk = [&](const std::vector<StorageId>& roots, auto&& at_live, size_t& left) {
    const Mark seen = begin_marks();
    std::vector<StorageId> stack;
    for (StorageId r : roots) {
      mark(r, seen);
      stack.push_back(r);
    }
    while (!stack.empty()) {
      const StorageId s = stack.back();
      stack.pop_back();
      bool go_on = true;
      for_each_unpinned_child(s, [&](StorageId cs) {
        if (marks_[cs] == seen || !go_on) return;
        mark(cs, seen);
        if (left == 0) {
          go_on = false;
          return;
        }
        --left;
        if (storages_[cs].dead)
          stack.push_back(cs);
        else
          go_on = at_live(cs);
      });
      if (!go_on) return false;
    }
    return true;
  };
  std::vector<TensorId> to_pin;
  walk(
      constants,
      [&](StorageId cs) {
        if (storages_[cs].versions > 0 && engine_->is_defined(storages_[cs].current))
          to_pin.push_back(storages_[cs].current);
        return true;
      },
      unlimited);
  // Note [Small frontiers]
  for (StorageId c : constants) {
    std::vector<TensorId> frontier;
    uint64_t frontier_bytes = 0;
    bool cut = true;
    walk(
        {c},
        [&](StorageId cs) {
          if (storages_[cs].versions > 0) {  // pinned above where material; else it needs c
            cut = engine_->is_defined(storages_[cs].current);
            return cut;
          }
          frontier.push_back(storages_[cs].current);
          frontier_bytes += engine_->storage_size(cs);
          cut = engine_->is_defined(storages_[cs].current) &&
                frontier_bytes <= engine_->storage_size(c);
          return cut;
        },
        unlimited);
    if (cut) to_pin.insert(to_pin.end(), frontier.begin(), frontier.end());
  }
  // Note [Small dead constants in bulk]
  std::unordered_map<StorageId, uint64_t> owned;
  if (!bulk) small.clear();
  size_t bulk_left = active_.size();  // at most one walk of lineage's size in all
  // Each collect starts elsewhere, so that where bulk_left runs out, the constants not
  // walked this time are walked at a later one.
  if (!small.empty())
    std::rotate(small.begin(), small.begin() + bulk_turn_++ % small.size(), small.end());
  for (StorageId c : small) {
    if (bulk_left == 0) break;
    StorageId owner = kNoId;
    size_t left = std::min(kBulkWalk, bulk_left);
    const size_t given = left;
    const bool whole = walk(
        {c},
        [&](StorageId cs) {
          const bool written =
              storages_[cs].versions > 0 && engine_->is_defined(storages_[cs].current);
          if (!written || owner != kNoId) return false;
          owner = cs;
          return true;
        },
        left);
    bulk_left -= given - left;
    if (whole && owner != kNoId) owned[owner] += engine_->storage_size(c);
  }
  for (const auto& [w, bytes] : owned)
    if (bytes >= engine_->storage_size(w)) to_pin.push_back(storages_[w].current);
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) marks_[it->first] = it->second;
  std::sort(to_pin.begin(), to_pin.end());
  to_pin.erase(std::unique(to_pin.begin(), to_pin.end()), to_pin.end());
  for (TensorId t : to_pin) {
    // Where it is evicted, a replay pins it once it is material again, as this walk would.
    recording_->pin_when_material(t);
    const Status status = engine_->pin(t);
    DTR_CHECK(status.ok(), "pinning a material storage cannot fail");
  }
  return !to_pin.empty();
}

// Note [Sparse tensors]
// ~~~~~~~~~~~~~~~~~~~~~~
// A sparse tensor (COO; CSR and the other compressed layouts) has no storage: it holds
// dense tensors, its indices and values, and PyTorch's sparse kernels read their memory
// without the dispatcher seeing them. Those dense tensors may be storages lineage knows:
// torch.sparse_coo_tensor(i, v) holds v itself, and SparseAdam builds its updates so.
// Evicted, the next sparse kernel read a storage with no data ("The tensor has a non-zero
// number of elements, but its data is not allocated yet", SparseAdam under a budget;
// tests/torch/test_sparse.py). So: every storage lineage knows that a sparse argument or
// result of an op holds is refilled if evicted and pinned (it stays pinned until it dies
// and no lineage needs it, as any pinned storage); one written through a sparse argument
// is first copied away if lineage reads it (Note [Copy on write]). An op with a sparse
// argument is not recorded: its results are constants to lineage, as an opaque op's are
// (Note [Never recompute] in dispatch_hook.cpp), and an op with a sparse result gives
// lineage nothing to record for it. Dense tensors a sparse kernel allocates inside itself
// are not known to lineage; read later by a dense op (`_values()`), they become constants.
void Lineage::hold_inner_tensors(const at::Tensor& t, bool written) {
  std::vector<at::Tensor> inner;
  torch_compat::inner_tensors(t, inner);
  for (const at::Tensor& x : inner) {
    if (!x.defined() || !x.has_storage()) continue;
    const StorageId s = lookup(x.storage().unsafeGetStorageImpl());
    if (s == kNoId) continue;
    const Status status = pin_tensor(storages_[s].current);
    if (!status.ok()) throw_status(status);
    // read past the dispatcher
    allocator_.set_unmovable(torch_compat::storage_address(*x.storage().unsafeGetStorageImpl()));
    if (written && has_live_readers(s)) copy_on_write(s);
  }
}

void Lineage::copy_on_write(StorageId s) {
  // Note [Copy on write]
  c10::intrusive_ptr<c10::StorageImpl> user = storages_[s].impl.lock();
  DTR_CHECK(user, "a written storage is alive");
  const size_t nbytes = user->nbytes();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  c10::DataPtr data = allocator->allocate(nbytes);  // may evict: S is locked
  if (nbytes > 0) std::memcpy(data.get(), user->data(), nbytes);
  auto copy = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                    std::move(data), allocator,
                                                    /*resizable=*/false);
  StorageRec& rec = storages_[s];
  for (const auto& [op, k] : rec.readers) {
    OpRec& r = ops_[op];
    if (r.args.empty()) continue;
    at::Tensor snap = slot_tensor(r.args, 0, r.input_slots[k]);
    if (snap.storage().unsafeGetStorageImpl() == user.get())
      snap.unsafeGetTensorImpl()->set_storage_keep_dtype(c10::Storage(copy));
  }
  by_impl_.erase(user.get());
  by_impl_[copy.get()] = s;
  rec.impl = c10::weak_intrusive_ptr<c10::StorageImpl>(copy);
  if (rec.exposed) {  // Note [Writes outside the dispatcher]: the copy is ours alone
    rec.exposed = false;
    remember_exposed(user);
  }
  set_block_owner(s);
  cow_.emplace_back(user.get(), copy);
}

// Note [Exceptions after an op]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// before_op and the kernel are guarded by the fallback: what throws there unlocks the op's
// inputs (abort_op) before the exception reaches the program. after_op unlocks them only at
// its end. Nothing in it throws by design (its checks stop the process), but its tables
// allocate, and a std::bad_alloc from them would leave the op's inputs locked for the rest
// of the run: counted as "in use by the running op" by every later out-of-memory error and
// never evictable (Note [Host exceptions] in eviction/engine.cpp met the same leak inside
// remats). So after_op runs its body under one guard that unlocks them; abort_op is
// idempotent, and every caller is covered. This keeps the locks honest, no more: a
// bad_alloc between the engine's record and the op's record here would leave an op no
// remat can run.
void Lineage::after_op(const c10::OperatorHandle& op, PendingOp& pending,
                       torch::jit::Stack& stack, uint64_t compute_ns) {
  struct ProgramOpEnds {  // Note [Out-of-memory within a remat]
    ~ProgramOpEnds() { program_op_here = nullptr; }
  } ends;
  try {
    record_finished_op(op, pending, stack, compute_ns);
  } catch (...) {
    abort_op(pending);
    throw;
  }
}

void Lineage::record_finished_op(const c10::OperatorHandle& op, PendingOp& pending,
                                 torch::jit::Stack& stack, uint64_t compute_ns) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const OpInfo& info = *pending.info;
  const size_t base = stack.size() - info.num_returns;
  // Note [Grown storages]: an op recorded in place whose target changed size is not
  // recorded (its target may have been copied away for readers: unknown to the engine);
  // the engine storages the written tensors view now whose size is not the engine's.
  if (pending.target >= 0 &&
      pending.tensors[pending.target].storage().nbytes() != pending.target_nbytes)
    pending.record = false;
  c10::SmallVector<StorageId, 1> grown;
  for (const at::Tensor& t : pending.written) {
    c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    const StorageId s = lookup(impl);
    if (s == kNoId || impl->nbytes() == engine_->storage_size(s) ||
        std::find(grown.begin(), grown.end(), s) != grown.end())
      continue;
    pending.record = false;
    if (storages_[s].exposed)
      remember_exposed(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl));
    grown.push_back(s);
  }
  for (uint16_t i = 0; i < info.num_returns; ++i)  // Note [Sparse tensors]
    for_each_cpu_tensor(
        stack[base + i], [](const at::Tensor&, int16_t) {},
        [&](const at::Tensor& t) { hold_inner_tensors(t, /*written=*/false); });
  OpId recorded = kNoId;
  if (pending.record) {
    std::vector<OutputSpec>& specs = pending.specs;
    std::vector<TensorSlot>& output_slots = pending.output_slots;
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>>& impls = pending.impls;
    std::vector<char>& evictable = pending.evictable;
    bool recordable = true;
    TensorSlot target_slot;
    if (pending.target >= 0) {
      target_slot = pending.input_slots[pending.target];
      if (pending.overwrite) {
        // Note [Overwrite]: the written tensor is no input; its snapshot keeps only its
        // metadata (a storage of no bytes), so it holds no reference to the user's storage.
        const auto k = static_cast<std::ptrdiff_t>(pending.target);
        pending.input_slots.erase(pending.input_slots.begin() + k);
        pending.inputs.erase(pending.inputs.begin() + k);
        at::Tensor shape = slot_tensor(pending.args, 0, target_slot);
        shape.unsafeGetTensorImpl()->set_storage_keep_dtype(c10::Storage(
            c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), 0,
                                                  c10::DataPtr(nullptr, shape.device()),
                                                  nullptr, /*resizable=*/false)));
      }
      if (pending.overwrite || pending.new_target_storage) {
        specs.push_back(OutputSpec{pending.target_nbytes, -1});
      } else {
        specs.push_back(OutputSpec{0, pending.target});
      }
    } else {
      const uint64_t min_bytes = min_evictable_bytes(config_);  // Note [Small storages]
      for (uint16_t i = 0; i < info.num_returns && recordable; ++i) {
        for_each_cpu_tensor(stack[base + i], [&](const at::Tensor& t, int16_t element) {
          const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
          int32_t alias = -1;
          for (size_t k = 0; k < pending.inputs.size() && alias < 0; ++k)
            if (pending.inputs[k] != kNoId &&
                storages_[engine_->storage_of(pending.inputs[k])].impl._unsafe_get_target() ==
                    impl)
              alias = static_cast<int32_t>(k);
          if (alias < 0) {
            for (const auto& w : impls)
              if (w._unsafe_get_target() == impl) recordable = false;  // two outputs, one storage
            if (lookup(impl) != kNoId) recordable = false;  // an old storage, not an input
          }
          specs.push_back(OutputSpec{alias < 0 ? t.storage().nbytes() : 0, alias});
          output_slots.push_back(TensorSlot{i, element});
          impls.push_back(t.storage().getWeakStorageImpl());
          const bool outside = alias < 0 && !is_ours(*impl);
          if (outside && t.storage().nbytes() > 0) warn_outside(op, t);
          evictable.push_back(alias >= 0 || outside               ? kKeepPinned
                              : t.storage().nbytes() >= min_bytes ? kKeepEvictable
                                                                  : kKeepSmall);
        });
      }
    }
    if (specs.empty()) recordable = false;
    if (recordable) {
      // Note [Packed masks]
      c10::DataPtr mask_bits;
      uint64_t mask_one = 0, remat_ns = Engine::kSameCost;
      // A DTR_TRACE packs them all (Note [Packed masks]); the trial's trace records the run
      // as it goes (Note [Trial by replay]).
      if (info.packs_mask && config_.pack_masks && pending.overwrite &&
          (engine_->stats().num_evictions > 0 || !config_.trace.empty()))
        remat_ns = pack_written_mask(stack[base].toTensor(), min_evictable_bytes(config_),
                                     mask_bits, mask_one);
      if (remat_ns == Engine::kSameCost && median_costs_) {  // Note [Noisy op times]
        const uint64_t estimate = op_costs_.observe(op_signature(op, pending.args), compute_ns);
        if (estimate != compute_ns) remat_ns = estimate;
      }
      std::vector<TensorId>& outputs = pending.outputs;
      const Status status = engine_->record(compute_ns, pending.inputs, specs, outputs, remat_ns);
      DTR_CHECK(status.ok(), "recording an op that ran cannot fail");
      sync_tables();
      const OpId id = engine_->op_of(outputs[0]);
      recorded = id;
      if (recording_->active())
        recording_->op(op.schema().name(), id, pending.inputs, specs, outputs, compute_ns, remat_ns,
                       pending.workspace_bytes);
      OpRec& r = ops_[id];
      r.op = info.replay_op ? *info.replay_op : op;  // Note [Seeded factories]
      r.args.assign(std::make_move_iterator(pending.args.begin()),
                    std::make_move_iterator(pending.args.end()));
      r.input_slots.assign(pending.input_slots.begin(), pending.input_slots.end());
      r.output_slots.assign(output_slots.begin(), output_slots.end());
      r.in_place = pending.target >= 0;
      r.overwrite = pending.overwrite;
      r.generator_arg = info.generator_arg;
      r.lean_kernel = info.lean_kernel;
      r.target_slot = target_slot;
      r.mask_bits = std::move(mask_bits);
      r.mask_one = mask_one;
      r.fingerprints.assign(pending.fingerprints.begin(), pending.fingerprints.end());
      r.keys = pending.keys;
      r.context = OpContext::current();  // Note [Op context]
      if (r.mask_bits) ++engine_->stats().num_packed_masks;
      for (size_t k = 0; k < pending.inputs.size(); ++k) {
        StorageRec& in = storages_[engine_->storage_of(pending.inputs[k])];
        in.readers.emplace_back(id, static_cast<uint32_t>(k));
        ++in.snapshot_refs;
      }
      if (pending.target >= 0) {
        if (pending.new_target_storage || pending.overwrite) {
          // The user's storage, copied away before the op ran, is this op's output (the
          // op returns the written tensor: OpInfo::in_place).
          const at::Tensor written = stack[base].toTensor();
          const StorageId made = engine_->storage_of(outputs[0]);
          adopt(made, written.storage().getWeakStorageImpl(), outputs[0]);
          storages_[made].copied_writes = pending.chain_writes;  // 0 after an overwrite
        } else {
          const StorageId old = engine_->storage_of(pending.inputs[pending.target]);
          storages_[old].current = outputs[0];
          ++storages_[old].versions;
          ++versions_since_collect_;  // Note [Discards in a trace]
        }
      } else {
        for (size_t i = 0; i < outputs.size(); ++i) {
          if (specs[i].alias >= 0) continue;
          const StorageId s = engine_->storage_of(outputs[i]);
          adopt(s, impls[i], outputs[i]);
          // Note [Results outside the allocator]: memory another deleter frees (a file that
          // from_file(shared=True) mapped) can change outside the dispatcher, as an external
          // constant's can (Note [Writes outside the dispatcher]): its readers are
          // fingerprinted, so a remat after a change is refused, not wrong.
          if (const c10::StorageImpl* impl = impls[i]._unsafe_get_target(); is_external(*impl)) {
            storages_[s].exposed = true;
            any_exposed_ = true;
          }
          if (evictable[i] != kKeepEvictable) {
            const Status pinned = pin_tensor(outputs[i]);
            DTR_CHECK(pinned.ok(), "pinning a material storage cannot fail");
            storages_[s].small = evictable[i] == kKeepSmall;
          }
        }
      }
    }
  }
  abort_op(pending);
  for (StorageId s : grown) forget_storage(s);
  if (pending.orphan != kNoId && !pending.record) pending.orphan = kNoId;
  // Note [Overwrite]: the old value is unreachable (no lineage reads it); the user's
  // storage has moved to the op's output.
  if (pending.orphan != kNoId) forget_storage(pending.orphan);
  // Note [Warm start in PyTorch]: the op's inputs are unlocked now.
  if (guide_ && recorded != kNoId) guide_->end_op(*engine_, recorded);
  watch_for_thrash();
  ++ops_recorded_;
  // What the last full collect kept, not active_ now: active_ grows with every op until
  // the next full collect, so comparing with it would put that off for good.
  if (++ops_since_collect_ >= std::max<uint64_t>(kMinOpsBetweenCollects, kept_at_collect_))
    collect(/*full=*/true);
  else if (scan_newest_.load(std::memory_order_relaxed))
    scan_for_dead(kNewestScanned);  // Note [Temporaries]
  else if (ops_since_collect_ % kOpsBetweenDeadScans == 0)
    collect(/*full=*/false);
}

// Note [Grown storages]
// ~~~~~~~~~~~~~~~~~~~~~
// An op can give a storage it writes new, larger memory: resize_ or resize_as_ to more
// elements than the storage holds, an out= op whose result PyTorch resizes
// (`torch.cat(..., out=buf)` into a buffer of another shape), set_ to a storage with a
// size past its end. The old bytes are copied over; the tail is whatever memory held.
// Lineage knew the storage at its old size. Recorded as a new version of it (an out= op,
// Note [Mutation]), a remat made the old size again and the process stopped on `a
// rematerialized output has another size`; recorded as a new storage after a copy for
// readers (Note [Copy on write]), a remat would have copied the new size out of the old
// value's copy; pinned (resize_as_), its bytes were counted at the old size. And resize_,
// a view op to the fallback (PyTorch tags it inplace_view), grew an evicted tensor without
// refilling it first; its next read stopped the process the same way. Now a resize_ that
// grows the storage runs as an opaque op (its tensor is refilled and locked first; Note
// [Never recompute] in dispatch_hook.cpp); one that fits stays a view op, so shrinking a
// result leaves it evictable. An op whose written storage changed size is not recorded,
// and after it a storage the written tensors view whose size is not the engine's is
// forgotten (readers of its old value, if any, read a copy already): the next op that
// reads the storage finds a constant of its new size, pinned as any constant. Found by a
// helper's probe (2026-12-03); tests/torch/test_grown_storages.py.
// forget_storage(s) lets go of s's StorageImpl (unless another engine storage has taken it,
// as an overwrite's output does) and discards s.
void Lineage::forget_storage(StorageId s) {
  auto it = by_impl_.find(storages_[s].impl._unsafe_get_target());
  if (it != by_impl_.end() && it->second == s) by_impl_.erase(it);
  storages_[s].impl =
      c10::weak_intrusive_ptr<c10::StorageImpl>(c10::intrusive_ptr<c10::StorageImpl>());
  release_storage(s);  // discards it already if pinned: Note [Freed pinned storages]
  if (!storages_[s].discarded) discard_storage(s);
}

void Lineage::budget_changed(uint64_t budget_bytes) {
  scan_newest_.store(budget_bytes == kUnlimitedBytes, std::memory_order_relaxed);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  thrash_watch_.rearm(engine_ ? engine_->stats() : Stats{}, budget_bytes);
  thrash_error_.clear();  // a raise still due was for the old budget
  ratio_budget_ = 0.0;    // Note [Ratio budgets]: a budget set since replaces the ratio
  ratio_error_.clear();
  if (!engine_ || budget_bytes == budget_bytes_) return;
  budget_bytes_ = budget_bytes;
  engine_->budget_changed();  // Note [Trial after a budget change] in auto_heuristic.cpp
  if (trial_by_replay_ && budget_bytes != kUnlimitedBytes) recording_->start_trial(held_storages());
}

// Note [Trial trace from a budget change] in recording.cpp: the material storages the
// program holds, each as the tensors it holds.
std::vector<std::vector<TensorId>> Lineage::held_storages() const {
  std::vector<std::vector<TensorId>> held;
  const size_t n = std::min<size_t>(storages_.size(), engine_->num_storages());
  for (StorageId s = 0; s < n; ++s) {
    const StorageRec& rec = storages_[s];
    if (rec.dead || rec.discarded || rec.death_traced || !engine_->is_material(s)) continue;
    std::vector<TensorId> tensors;
    for (TensorId t : engine_->storage_tensors(s))
      if (engine_->external_refs(t) > 0) tensors.push_back(t);
    if (!tensors.empty()) held.push_back(std::move(tensors));
  }
  return held;
}

void Lineage::end_period() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  recording_->step();  // first: `auto` may replay the trace up to here (Note [Trial by replay])
  engine_->end_period();
  ++periods_ended_;
  if (ratio_budget_ > 0.0 && periods_ended_ >= kRatioBudgetSteps) apply_ratio_budget();
}

// Note [Ratio budgets]
// ~~~~~~~~~~~~~~~~~~~~
// The simulator reads budget:0.5x as half the baseline peak, which it knows. A live run
// does not know its peak before it reaches it, and a user who wants "half of what this
// script needs" should not have to run it twice to learn the bytes (bench/ and make demo
// did). So the host runs the first kRatioBudgetSteps training steps (periods: Note
// [Iteration periods]) with no budget, recording lineage as always, and at the end of the
// last of them sets the budget to the ratio of the peak of allocated bytes so far. Two
// steps, as `auto`'s trial, because the first is not yet the steady state: Adam and
// momentum make their state in the first step's optimizer step, after the activations
// died, so the second step is the first whose forward pass runs beside that state. The
// budget is set between steps, where little is live but what the program keeps: the
// allocator evicts down to it (CachingAllocator::lower_budget) and then it is hard, as one
// set from the start. Setting it starts `auto`'s trial from here as dtr.set_budget does
// (Note [Trial after a budget change]), and restarts the peak stats as
// dtr.reset_peak_stats() does, so that the exit report's peak is the budgeted steps' (it
// read twice the budget, and looked like a budget broken; the first steps' peak is in the
// line that says the budget). Where what stays allocated cannot be brought under it (the
// parameters and optimizer state alone are more), the budget is not set, and the
// program's next op raises PyTorch's out-of-memory error saying so: an end of step is
// inside an optimizer's scope end or dtr.mark_step(), where nothing can be thrown. A
// program that ends fewer steps runs with no budget, and is told so at exit (if it ran an
// op: not torchrun's agent). A budget set by dtr.set_budget before then replaces the
// ratio. The peak is the allocator's (dtr.max_memory_allocated()): dtr.reset_peak_stats()
// within the first steps lowers it.
void Lineage::apply_ratio_budget() {
  const Budget ratio = config_.budget;
  ratio_budget_ = 0.0;
  const uint64_t peak = allocator_.stats().allocated_bytes.all.peak;
  const uint64_t bytes = std::max<uint64_t>(1, ratio.resolve(peak));
  const std::string what = "budget " + ratio.to_string() + " of the peak over the first " +
                           std::to_string(kRatioBudgetSteps) + " training steps (" +
                           format_bytes(peak) + ")";
  if (allocator_.lower_budget(bytes)) {
    allocator_.reset_peaks();  // the report's peak, max_memory_allocated(): the budgeted steps
    budget_changed(bytes);
    std::fprintf(stderr, "dtr: %s: %s from here on (%llu bytes)\n", what.c_str(),
                 format_bytes(bytes).c_str(), static_cast<unsigned long long>(bytes));
    std::fflush(stderr);
    return;
  }
  const uint64_t allocated = allocator_.stats().allocated_bytes.all.current;
  const double needed = std::ceil(100.0 * static_cast<double>(allocated) / peak) / 100.0;
  char at_least[32];
  std::snprintf(at_least, sizeof at_least, "%.2fx", needed);
  ratio_error_ = "dtr: out of memory: " + what + " is " + format_bytes(bytes) + ", but " +
                 format_bytes(allocated) + " stay allocated between steps after evicting all " +
                 "that could be (pinned " + format_bytes(engine_->stats().pinned_current) +
                 "): what the program keeps from step to step does not fit. The budget was "
                 "not set. Try: a ratio of at least " +
                 at_least + " (more, for the next step's activations), or a budget in bytes.";
  std::fprintf(stderr, "%s\n", ratio_error_.c_str());
  std::fflush(stderr);
}

void Lineage::warn_ratio_budget_unapplied() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // Not in a process that ran no op: torchrun's agent, a launcher (the workers it starts
  // have budgets of their own, Note [Preload shim] in process_kind.cpp).
  if (ratio_budget_ <= 0.0 || ops_recorded_ == 0) return;
  std::fprintf(stderr,
               "dtr: warning: budget %s was never set: it is set after the program's first %u "
               "training steps (torch.optim steps, or dtr.mark_step() calls), and the program "
               "ended %u; the run had no budget (Note [Ratio budgets])\n",
               config_.budget.to_string().c_str(), kRatioBudgetSteps, periods_ended_);
  std::fflush(stderr);
}

// Note [Iteration periods]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A period is what `auto` measures and replays (Note [Policy trial] in
// eviction/heuristics/auto_heuristic.cpp) and what a trace's STEP marks: it should be one
// training iteration, so that one period costs what the next one will. The host sees
// optimizer steps (Note [Step marks] in dispatch_hook.cpp), and a GAN steps two optimizers
// an iteration: the discriminator's, then the generator's. Each step used to end a period,
// so the periods alternated between two kinds, and the trial by replay, which figures one
// period, saw only the kind that was last (the GAN at 0.6 of its peak: every candidate
// thrashed live in the other kind, while the replays read 0.22-0.67). So a step ends a
// period only if it wrote a storage the run's first step wrote (the anchors, held weakly):
// every step of a lone optimizer does (its parameters, or its state), a second optimizer's
// step writes other parameters and does not, and one iteration of a GAN is one period. A
// step that writes nothing through the dispatcher ends a period only while there are no
// anchors, as every step did before. Once every anchor has died (a new model, a state
// loaded into new tensors), the next step writes the new anchors and ends a period. The
// anchors can also outlive their optimizer's use: a run that first trains one part with
// one optimizer and then the rest with another, while the first part lives on, would end
// no period again. So the steps between two that write an anchor are counted (the longest
// such run, the other optimizers' steps in an iteration: 1 for a GAN), and a step that
// makes the misses more than kStaleAnchorSteps plus twice that takes its writes as the new
// anchors and ends a period: the switch above ends no period for 8 steps, then one a step,
// while up to 9 optimizers an iteration, or a GAN, never re-anchor. Only the
// outermost scope counts, so an optimizer that wraps another (both torch.optim optimizers,
// each step in its own scope) makes one period of a step, not two.
void Lineage::note_step_write(c10::StorageImpl* impl) {
  if (step_writes_.size() < kMaxStepAnchors)
    step_writes_.emplace_back(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl));
  const auto it = step_anchors_.find(impl);
  step_wrote_anchor_ |= it != step_anchors_.end() && !it->second.expired();
}

void Lineage::begin_optimizer_step() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  step_open_ = true;
  step_wrote_anchor_ = false;
  step_writes_.clear();
  // The anchors all died: the step to come writes the next ones.
  if (std::all_of(step_anchors_.begin(), step_anchors_.end(),
                  [](const auto& a) { return a.second.expired(); }))
    step_anchors_.clear();
}

// Note [Marked steps]
// ~~~~~~~~~~~~~~~~~~~
// A loop that updates its parameters by hand, or with an optimizer that is not a
// torch.optim.Optimizer, has no step scopes, so no periods: `auto` never leaves dtr_eq, and
// a trace has no STEP for dtr-sim's trial. dtr.mark_step() ends a period where the program
// says an iteration ends. Marks and optimizer scopes together would end two periods an
// iteration, so the first mark makes the marks the program's: optimizer steps end none
// after it.
void Lineage::mark_step() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  marked_steps_ = true;
  end_period();
}

void Lineage::end_optimizer_step() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (!step_open_) return;
  step_open_ = false;
  if (marked_steps_) return;  // Note [Marked steps]
  bool ends = true;
  if (step_wrote_anchor_) {
    step_longest_misses_ = std::max(step_longest_misses_, step_misses_);
    step_misses_ = 0;
  } else if (step_anchors_.empty() ||
             ++step_misses_ > kStaleAnchorSteps + 2 * step_longest_misses_) {
    step_anchors_.clear();  // new anchors: what this step wrote
    for (const auto& w : step_writes_)
      if (!w.expired()) step_anchors_.emplace(w._unsafe_get_target(), w);
    step_misses_ = step_longest_misses_ = 0;
  } else {
    ends = false;  // another optimizer's step within the iteration
  }
  step_writes_.clear();
  if (ends) end_period();
}

void Lineage::abort_op(PendingOp& pending) {
  program_op_here = nullptr;  // Note [Out-of-memory within a remat]
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  engine_->unlock_tensors(pending.locked);
  pending.locked.clear();
  if (pending.unlocked_target) {
    auto it =
        std::find(unlocked_targets_.begin(), unlocked_targets_.end(), pending.unlocked_target);
    if (it != unlocked_targets_.end()) unlocked_targets_.erase(it);
    pending.unlocked_target = nullptr;
  }
  pending.release();
  cow_.clear();
}

// --- the engine's side ---------------------------------------------------------------------

// Note [Thrashing within one op]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The watch (Note [Thrashing in a live run] in eviction/thrash_watch.cpp) was asked after
// each op only. One op's inputs can take a cascade of remats that does not end for
// minutes: lru on densenet121 at 0.5 of its peak sat in the first backward pass for over
// 16 minutes (2026-11-29, `make eval`), and the run said nothing. So each remat asks too,
// before it runs, with the remats before it counted. A warning prints at once. A raise
// cannot be thrown from there (it would leave the engine in the middle of a remat), so it
// is armed, and the engine, asked after that remat (stop_remats, Note [Stopping a
// materialization] in eviction/engine.cpp), abandons the materialization with `thrash`;
// the call that started it (locking an op's inputs, a pin, a raw access) then throws the
// armed message. An op that was about to run does not run, nothing stays locked, and what
// was rematerialized so far stays in memory as any evictable storage. A raise armed after
// an op is thrown at the start of the next one (Lineage::before_op), or where a
// materialization before it is stopped.
void Lineage::throw_status(const Status& status) {
  if (status.code == StatusCode::thrash && !thrash_error_.empty()) {
    const std::string message = std::move(thrash_error_);
    thrash_error_.clear();
    allocator_.count_oom();
    torch_compat::throw_out_of_memory(message);
  }
  if (status.code == StatusCode::refused) {  // Note [Writes outside the dispatcher]
    const std::string message = refusal_.empty() ? status.message() : std::move(refusal_);
    refusal_.clear();
    TORCH_CHECK(false, message);
  }
  torch_compat::throw_out_of_memory(status.message());  // it starts "dtr: "
}

bool Lineage::stop_remats() { return !thrash_error_.empty(); }

// Note [Writes outside the dispatcher]
// Whether the exposed inputs of `r` hold what they held when the op read them (an op
// whose lineage was dropped, Note [Collecting dead lineage], is never run again).
bool Lineage::exposed_inputs_unchanged(const OpRec& r) {
  if (r.args.empty()) return true;
  for (const auto& [slot, expected] : r.fingerprints)
    if (fingerprint_at(r.args, slot) != expected) return false;
  return true;
}

// Note [Unrecomputable victims] in eviction/engine.cpp: `s` can be made again only if
// every op its remat would run finds its exposed inputs unchanged: the ops that make it
// and, through evicted parents, theirs (the first kMaxVictimWalk storages of that walk;
// a parent past them whose input changed is refused at its remat, as before). If not, `s`
// is pinned: it stays. Each look at an op hashes its exposed inputs (a DataLoader worker's
// batch is exposed, and most storages of a step descend from the ops that read it), so an
// op found unchanged is not looked at again until the program runs another op.
bool Lineage::may_evict(StorageId s) {
  if (!any_exposed_) return true;  // no op has a fingerprint
  constexpr size_t kMaxVictimWalk = 256;
  if (unchanged_at_ != ops_recorded_) {
    unchanged_ops_.clear();
    unchanged_at_ = ops_recorded_;
  }
  const Mark seen = begin_marks();
  std::vector<StorageId>& stack = victim_walk_;
  stack.assign(1, s);
  marks_[s] = seen;
  for (size_t walked = 0; !stack.empty() && walked < kMaxVictimWalk; ++walked) {
    const StorageId u = stack.back();
    stack.pop_back();
    for (TensorId t : engine_->storage_tensors(u)) {
      const OpId op = engine_->op_of(t);
      const OpRec& r = ops_[op];
      if (!r.fingerprints.empty() &&
          std::find(unchanged_ops_.begin(), unchanged_ops_.end(), op) == unchanged_ops_.end()) {
        if (!exposed_inputs_unchanged(r)) {
          const Status pinned = pin_tensor(storages_[s].current);
          DTR_CHECK(pinned.ok(), "pinning a material storage cannot fail");
          return false;
        }
        unchanged_ops_.push_back(op);
      }
      for (TensorId in : engine_->op_inputs(op)) {
        const StorageId p = engine_->storage_of(in);
        if (engine_->is_material(p) || marks_[p] == seen) continue;
        marks_[p] = seen;
        stack.push_back(p);
      }
    }
  }
  return true;
}

bool Lineage::may_recompute(OpId op) {
  const OpRec& r = ops_[op];
  if (!exposed_inputs_unchanged(r)) {
    refusal_ = std::string("dtr: cannot recompute an evicted result of ") +
               (r.op ? r.op->schema().name() : std::string("an op")) +
               ": the memory of one of its inputs was written outside the dispatcher after the "
               "op read it (through a numpy array, DLPack, data_ptr() or storage() of the "
               "tensor, the array it was made from with torch.from_numpy, another process "
               "sharing its memory, or the file torch.from_file(..., shared=True) mapped), so "
               "a remat would compute other values. Write such "
               "tensors with torch ops, which dtr sees (t.copy_(torch.from_numpy(a)), t[:] = "
               "...), or change a clone() through numpy; memory that others write "
               "(share_memory(), Hogwild, a shared file) needs a budget at which no result "
               "computed from it "
               "is evicted, or no budget (Note [Writes outside the dispatcher])";
    return false;
  }
  return true;
}

void Lineage::watch_for_runaway() {
  if (!thrash_error_.empty()) return;
  std::optional<std::string> runaway =
      thrash_watch_.runaway(engine_->stats(), &engine_->heuristic());
  if (!runaway) return;
  ++engine_->stats().num_thrash_alerts;  // Note [Runaway cascades] in thrash_watch.cpp
  thrash_error_ = std::move(*runaway);   // stop_remats() stops the cascade
}

void Lineage::watch_for_thrash() {
  std::optional<std::string> thrash = thrash_watch_.check(engine_->stats(), &engine_->heuristic());
  if (!thrash) return;
  ++engine_->stats().num_thrash_alerts;  // Note [Thrashing in a live run]
  if (thrash_action_ == ThrashAction::raise) {
    thrash_error_ = std::move(*thrash);
  } else {
    std::fprintf(stderr, "%s\n", thrash->c_str());
    std::fflush(stderr);
  }
}

// Note [Out-of-memory within a remat]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Remaking an evicted tensor can need more memory than the tensor holds: its op's scratch
// (a 3x3x3 convolution backward of r3d_18's layer4 asks for 217.7 MiB beside a 27 MiB
// weight gradient) and its evicted inputs. Where such a request fails, the program's op
// is one that asked for little (r3d_18 at 0.7 failed in SGD's `param.add_`, whose write
// first refills the gradients evicted before it, Note [Pinned writes]), and the message
// named only that op's bytes. So the allocator's message now says which op was running
// again, for how many bytes of results, and for which op of the program: the remat and
// the program's op are kept per thread, as the request that fails is this thread's. The
// engine remakes a chain of evicted parents from an explicit stack (Note [Explicit remat
// stack] in eviction/engine.cpp), so the op running again may be a parent several frames
// below the tensor the program asked for: then the message names that tensor's op too,
// and how deep the chain is.
std::string Lineage::oom_context() const {
  if (remat_here == kNoId) return {};
  std::unique_lock<std::recursive_mutex> lock = allocator_lock();
  if (!lock.owns_lock()) return {};
  auto name = [&](OpId op) {
    return ops_[op].op ? ops_[op].op->schema().name() : std::string("an op");
  };
  auto results = [&](OpId op) {
    uint64_t bytes = 0;
    for (TensorId t : engine_->op_outputs(op)) {
      const StorageId s = engine_->storage_of(t);
      if (engine_->storage_tensors(s)[0] == t) bytes += engine_->storage_size(s);
    }
    return bytes;
  };
  std::string out = "It came from remaking an evicted tensor: " + name(remat_here) +
                    " ran again for " + format_bytes(results(remat_here)) + " of results";
  const TensorId target = engine_->materializing();
  // The op that made the target's storage: a view's own op makes no bytes.
  const OpId asked = target == kNoId
                         ? kNoId
                         : engine_->op_of(engine_->storage_tensors(engine_->storage_of(target))[0]);
  if (asked != kNoId && asked != remat_here) {
    out += ", on the way to remaking " + name(asked) + "'s " + format_bytes(results(asked)) + " (" +
           std::to_string(engine_->materialize_depth()) + " ops deep)";
  }
  if (program_op_here) out += ", while the program ran " + program_op_here->name();
  return out +
         ". Remaking can need more than the tensor's own bytes (the op's scratch, its "
         "evicted inputs); a higher budget keeps more of them.";
}

void Lineage::on_compute(OpId op, bool remat) {
  DTR_CHECK(remat, "the torch host runs each op itself before recording it");
  struct RematHere {  // Note [Out-of-memory within a remat]
    const OpId outer = remat_here;
    explicit RematHere(OpId op) { remat_here = op; }
    ~RematHere() { remat_here = outer; }
  } remat_here_scope{op};
  watch_for_thrash();  // Note [Thrashing within one op]
  watch_for_runaway();
  // What the remat really took; the engine charges the op's remat cost (Note [Noisy op
  // times]). Parents were refilled by calls of their own, so nothing is timed twice. Of
  // that, what making room for the remat took: Note [Room within remats].
  struct Timed {
    Stats& stats;
    const SteadyClock& clock;
    const Tick start = clock.now();
    const uint64_t room_before = room_ns_on_this_thread();
    ~Timed() {
      stats.remat_measured_ns += clock.now() - start;
      stats.remat_room_ns += room_ns_on_this_thread() - room_before;
    }
  } timed{engine_->stats(), clock_};
  OpRec& r = ops_[op];
  DTR_CHECK(r.op.has_value() && !r.args.empty(),
            "dtr: internal error: rematerializing an op whose lineage was dropped");
  // Note [Op context]: the op runs with the keys and the state it first ran with. The
  // guards cover what the lean kernels dispatch themselves.
  c10::impl::ExcludeDispatchKeyGuard no_hook(kDtrKey);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  // Legacy vmap (jacobian(vectorize=True), is_grads_batched) puts VmapMode in the thread's
  // included keys: the ops a kernel calls inside (randn's normal_) reached its random-op
  // check in a remat the program's own op never made there (a probe, 2026-12-07).
  c10::impl::ExcludeDispatchKeyGuard no_vmap_mode(c10::DispatchKey::VmapMode);
  OpContextScope context(r.context, /*raise_threads=*/!forked_child_);
  MemoryHistory::ContextScope remat_allocations(history_, MemoryContext::remat);
  torch::jit::Stack stack(r.args.begin(), r.args.end());
  // Note [Seeded ops] (dispatch_hook.cpp): each replay draws from a copy of the state the
  // op first drew from, and leaves the program's generator alone.
  if (r.generator_arg >= 0 && !r.mask_bits)
    stack[r.generator_arg] = torch_compat::copy_generator(stack[r.generator_arg]);
  const std::vector<TensorId>& outputs = engine_->op_outputs(op);
  if (r.in_place) {
    // In place: the written storage gets the input's value first if they differ (Note
    // [Copy on write]; none for Note [Overwrite]), then the op runs on it again.
    const StorageId out = engine_->storage_of(outputs[0]);
    c10::intrusive_ptr<c10::StorageImpl> user = storages_[out].impl.lock();
    if (!user) return;  // nobody can read it any more
    const TensorSlot slot = r.target_slot;
    at::Tensor input = slot_tensor(stack, 0, slot);
    c10::StorageImpl* from = input.storage().unsafeGetStorageImpl();
    if (from != user.get()) {
      const size_t nbytes = user->nbytes();
      if (!user->data() && nbytes > 0) {
        user->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(nbytes));
        set_block_owner(out);
      }
      if (nbytes > 0 && !r.overwrite)
        std::memcpy(torch_compat::writable_bytes(*user), from->data(), nbytes);
      at::Tensor target = snapshot_of(input);
      target.unsafeGetTensorImpl()->set_storage_keep_dtype(c10::Storage(user));
      set_slot_tensor(stack, 0, slot, std::move(target));
    }
    if (r.mask_bits) {  // Note [Packed masks]: the bits bernoulli_ wrote, not a new draw
      const size_t n = static_cast<size_t>(input.numel());
      const size_t itemsize = static_cast<size_t>(input.element_size());
      DTR_CHECK(n * itemsize == user->nbytes() && user->data() != nullptr,
                "a packed mask does not cover its storage");
      unpack_mask(static_cast<const uint8_t*>(r.mask_bits.get()), n, itemsize, r.mask_one,
                  torch_compat::writable_bytes(*user));
      ++engine_->stats().num_mask_unpacks;
      return;
    }
    r.op->redispatchBoxed(r.keys, &stack);
    return;
  }
  if (!r.lean_kernel || !r.lean_kernel(stack)) r.op->redispatchBoxed(r.keys, &stack);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorId u = outputs[i];
    const StorageId s = engine_->storage_of(u);
    if (engine_->storage_tensors(s)[0] != u || engine_->is_material(s)) continue;
    c10::intrusive_ptr<c10::StorageImpl> impl = storages_[s].impl.lock();
    if (!impl) continue;
    at::Tensor fresh = slot_tensor(stack, 0, r.output_slots[i]);
    c10::StorageImpl* made = fresh.storage().unsafeGetStorageImpl();
    DTR_CHECK(made->nbytes() == impl->nbytes(),
              "dtr: a rematerialized output has another size than the original (an op that "
              "is not deterministic in its output shape?)");
    impl->set_data_ptr_noswap(made->set_data_ptr(c10::DataPtr(nullptr, made->device())));
    set_block_owner(s);
  }
}

void Lineage::on_evict(StorageId s) {
  c10::intrusive_ptr<c10::StorageImpl> impl = storages_[s].impl.lock();
  if (!impl || !impl->data()) return;
  evicted_bytes_in_call_ += round_block_size(impl->nbytes());
  note_evicted_bytes(impl->nbytes());  // Note [Reads of evicted storages]
  // The old DataPtr's deleter gives the block back to the caching allocator.
  impl->set_data_ptr_noswap(c10::DataPtr(nullptr, impl->device()));
}

// Note [Engine lock]: the lock for a call from the allocator; not held when an ATen worker
// could not take it.
std::unique_lock<std::recursive_mutex> Lineage::allocator_lock() const {
  std::unique_lock<std::recursive_mutex> lock(mutex_, std::defer_lock);
  if (at::in_parallel_region())
    (void)lock.try_lock();  // owns_lock() tells the caller
  else
    lock.lock();
  return lock;
}

// Note [Evictions that free nothing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine's pool can hold storages whose StorageImpl is gone (found dead, their memory
// already back in the allocator): evicting one frees no block. The allocator retries only
// after a call that freed something (it counts its own frees), and a contiguous request
// gets one eviction per call, so such an eviction ended the chain in out-of-memory while
// other storages were evictable: resnet18 at a 163M budget under a 180M reserved limit ran
// out of memory asking for 2.25 MiB with 86.5 MiB evictable, after evicting a dead 2 KiB
// storage. So the engine is asked again until a block is really freed or it has nothing
// left.
// Note [Host work in op times]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op's time is taken around its kernel (dispatch_hook.cpp), and the kernel's allocations
// may call make_room: a collect, an eviction search, the evictions. That work is the
// library's, not the op's, and it was charged to the op: the op's cost is its outputs'
// compute in every score, the clock's tick, and the TIME a trace records. The error feeds
// itself. A 500-layer residual MLP 64 wide (12 KiB activations, min_evictable:4K) at 0.6 of
// its peak under dtr_ancestors: in the backward, searches reached 2,000 evicted storages
// per candidate, an op that searched looked hundreds of times its cost, and the charged
// compute of the program's ops came to 17.7 s against 2.4 s under dtr_eq, whose search is
// cheap. 3 steps took 10-54 s (two runs) and the search reached 100-590 million storages,
// against 77 thousand and 3.2 s once the ops' times left make_room out; a replay of the
// run's trace had reached 0.2 million (Note [Search work] in eviction/engine.cpp). So each
// thread sums the wall time it spends in make_room, and an op's time is the kernel's less
// what its thread spent there meanwhile. Time a worker thread of the op's parallel region
// spends in make_room (it only tries the lock: Note [Engine lock]) still counts, as the op
// waits for it. dtr.make_room_ns sums it all; the remats' measured time
// (dtr.remat_measured_ns) still holds what making room took within them, as the wall time
// they cost the run. With no budget the allocator asks instead before each new peak
// (before_new_peak: scans for dead storages and full collects, Note [Temporaries]), and
// that is left out and summed the same way: on a 2000-layer residual MLP 64 wide with no
// budget it was most of the ops' time (dtr.model_compute_ns 0.82 s against 0.31-0.36 s
// under a budget, 2026-12-05; 0.32 s left out), and a trace is recorded with no budget.
namespace {
thread_local uint64_t room_ns_on_thread = 0;
thread_local bool in_make_room = false;

// Times the outermost make_room or before_new_peak on this thread.
class RoomTimer {
 public:
  RoomTimer(Stats& stats, const SteadyClock& clock) : stats_(stats), clock_(clock) {
    in_make_room = true;
  }
  ~RoomTimer() {
    if (!outer_) return;
    in_make_room = false;
    const uint64_t ns = clock_.now() - start_;
    room_ns_on_thread += ns;
    stats_.make_room_ns += ns;
  }

 private:
  Stats& stats_;
  const SteadyClock& clock_;
  const bool outer_ = !in_make_room;
  const Tick start_ = clock_.now();
};
}  // namespace

uint64_t room_ns_on_this_thread() { return room_ns_on_thread; }

// Note [Scan credit]
// ~~~~~~~~~~~~~~~~~~
// While a program's memory grows, every op raises the peak, and each such op scanned all
// of alive_: a cost of what the program holds per op, quadratic over the growth. A probe
// with 5000 one-element parameters under Adam (its first step makes two state tensors per
// parameter) took 6.2 s for that step with the library against 0.46 s without, 30% of
// the samples in found_dead. So a scan at a new peak waits until the ops since the last
// scan of all of alive_ have earned it, kScannedPerOp storages each: a program that holds
// fewer storages than that is scanned at every new peak as before. With 1024 found_dead
// still took 13% of the samples at 10000 parameters. With 256 the peaks with no budget
// moved by at most 17 KiB (2 steps each, against remat:False: resnet18 +35 KiB before and
// after, the LSTM LM +8.5 KiB before and +24.5 KiB after, the transformer +0.5 and +16.5
// KiB); bench/torch_many_tensors.py.
constexpr size_t kScannedPerOp = 256;
// Under a budget the same scan came with nearly every op's eviction request (collect,
// Note [Collects when making room]): on a residual MLP 2000 layers deep and 64 wide at 0.6
// of its peak (min_evictable:4K), 12 970 scans of 9 570 storages each on average, which
// found 3.4 dead storages each (124 million found_dead calls for 44 050 deaths; found_dead
// and the scan took 15% of the samples, the records and StorageImpls they read missing
// the cache). So there too all of alive_ waits for the credit, and the newest
// kNewestScanned meanwhile, as after every op with no budget (Note [Temporaries]): 14
// million calls, the same 44 050 deaths found, no more evictions, and making room
// 1.20-1.31 s -> 0.77-0.82 s (3 interleaved pairs, one thread). A dead storage not found
// yet is still in the pool, where no op touches it (its staleness only grows), and a
// request that can evict nothing gets the full collect (which scans all) before it
// gives up.

// Whether ops ran since a scan of all of alive_ at `last_full_scan` (ops recorded then) and
// paid for another: Note [Scan credit]. The collector's scans count from dead_scan_ops_,
// the trial trace's from trace_scan_ops_ (Note [Deaths in the trial's trace] in
// collector.cpp).
bool Lineage::scan_earned(uint64_t last_full_scan) const {
  return last_full_scan != ops_recorded_ &&
         alive_.size() <= kScannedPerOp * (ops_recorded_ - last_full_scan);
}

uint64_t Lineage::make_room(uint64_t bytes_needed, bool contiguous_request) {
  std::unique_lock<std::recursive_mutex> lock = allocator_lock();
  if (!lock.owns_lock()) return 0;
  RoomTimer timed(engine_->stats(), clock_);  // Note [Host work in op times]
  evicted_bytes_in_call_ = 0;
  if (dead_scan_ops_ != ops_recorded_)  // Note [Scan credit]
    scan_for_dead(scan_earned(dead_scan_ops_) ? SIZE_MAX : kNewestScanned);
  // Note [Collects when making room]
  const bool collected = full_collect_due();
  if (collected) collect(/*full=*/true);
  uint64_t freed = evicted_bytes_in_call_;
  auto enough = [&] { return freed > 0 && (contiguous_request || freed >= bytes_needed); };
  if (enough()) return freed;
  auto evict = [&] {
    // Frees from here are evictions (the storages keep their lineage); the dead storages
    // collect() freed above are not.
    MemoryHistory::ContextScope evicting(history_, MemoryContext::evicting);
    // Note [Evictions that free nothing]
    uint64_t more = 0, claimed = 0;
    const uint64_t before = evicted_bytes_in_call_;
    do {
      claimed = engine_->free_for_allocator(bytes_needed - std::min(bytes_needed, freed),
                                            contiguous_request);
      more += claimed;
    } while (claimed > 0 && evicted_bytes_in_call_ == before);
    return more;
  };
  uint64_t more = evict();
  if (freed + more == 0 && !collected && full_collect_stale()) {
    collect(/*full=*/true);  // the one put off could free what eviction cannot
    freed = evicted_bytes_in_call_;
    if (!enough()) more = evict();
  }
  if (freed + more == 0 && config_.debug >= 1) print_storages();
  return freed + more;
}

// Note [Collects when making room]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// make_room ran a full collect whenever an op had been recorded or a storage had died
// since the last one: under a budget, before nearly every eviction request. A full collect
// walks what lineage holds, so on a model of many small ops that is a cost of the whole
// graph per op: a 1000-layer residual MLP 64 wide (tests/torch/scripts/mlp.py --residual,
// min_evictable:4K) at 0.6 of its peak under dtr_eq spent 40% of its run in collect, where
// the ops themselves took a tenth of it. What a full collect frees that a scan for dead
// storages does not is dead pinned storages no lineage needs (a dead unpinned one is
// evicted as it is found dead: eager eviction; a dead one a remat left material is in the
// pool and goes first with dead_first), and its cut (Note [Dead constants]) must come
// before anything written in place could be evicted. So a full collect still comes at
// once where pinned storages of kSmallPinnedBytes or more died since the last one (or it
// kept such and something died since), and where an op wrote a new version while the last
// one held a dead constant; else it waits until the ops since the last have earned it,
// kCollectedPerOp storages of lineage each (as Note [Scan credit]), and comes anyway when
// nothing could be evicted without it. On that MLP (two threads) a run's full collects went
// from 6100-6550 to 118-138, and making room from 1.5-3.4 s to 1.0-1.7 s. Rarer is not
// better: at 4 and 8 storages per op, 3 of 5 and 1 of 3 one-thread runs fell into a
// cascade of some 90 thousand evictions against 9 thousand (dead evicted storages left
// undiscarded still count in the eq classes, and dead ones stay in the pool); at 16 and 64,
// none of 4 and 5. The cascade also comes with the old rule, 1 run in 13 on two threads.
constexpr size_t kCollectedPerOp = 64;

// Whether an op was recorded or a storage died since the last full collect: else one
// could free nothing more.
bool Lineage::full_collect_stale() const {
  return full_collect_ops_ != ops_recorded_ || full_collect_deaths_ != deaths_;
}

bool Lineage::full_collect_due() const {
  if (!full_collect_stale()) return false;
  // Small dead pinned storages a collect kept wait for the credit: the storages that need
  // them die all the time, and a collect after each death was 28% of a run's samples again.
  const uint64_t dead_pinned =
      pinned_dead_bytes_ + (deaths_ != full_collect_deaths_ ? pinned_dead_kept_large_bytes_ : 0);
  if (dead_pinned >= kSmallPinnedBytes) return true;
  if (holds_dead_constants_ && versions_since_collect_ > 0) return true;
  return full_collect_earned(kCollectedPerOp);
}

// Whether the ops since the last full collect paid for one, per_op storages of lineage each.
bool Lineage::full_collect_earned(size_t per_op) const {
  return full_collect_ops_ == UINT64_MAX ||
         active_.size() <= per_op * (ops_recorded_ - full_collect_ops_);
}

// Note [Temporaries]: with no budget, the storages that died since the last scan are
// released before the peak grows (Note [New peaks] in allocator/caching_allocator.cpp),
// so the peak is what the program holds, not what the scans have not reached yet. Under a
// budget dead storages stay as a free cache for make_room.
//
// Note [Dead pinned storages at a new peak]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pinned storage that died (a tensor read through .numpy(), an old parameter value) is
// freed only by a full collect that finds no lineage needs it (Note [Discards in a
// trace]); one a full collect kept can go once the storages that needed it die. With no
// budget, full collects came only every so many ops, and a loop that called .numpy() on a
// 256 KiB activation each step and read it once more peaked at 59 MiB against the 1 MiB
// it held (tests/torch/test_raw_access.py). So before a new peak, a full collect runs when
// pinned storages died since the last one, or it kept dead pinned ones and something died
// since: of kSmallPinnedBytes or more (batched, as while tracing). It needs a new death,
// so it runs at most once per scan.
// At once only where one such storage is of kSmallPinnedBytes or more. A full collect
// costs what lineage holds, and on a model of many small pinned storages (results under
// min_evictable) each frees one or two of them: a residual MLP 2000 layers deep and 64 wide
// (12 KiB activations; tests/torch/scripts/mlp.py --residual) made 7246 full collects in 3
// steps with no budget, one every 9 ops, 54 KiB freed by each, and its run took 2.7 times
// as long as without lineage. So smaller ones wait until the ops since the last full
// collect have earned one, kScannedPerOp storages of lineage each (as Note [Scan credit]),
// and get meanwhile the scan of all of alive_ that the full collect began with: without
// it the packed GRU of test_policy_trial.py peaked 1.2 MiB higher, as those collects had
// been its scans.

uint64_t Lineage::before_new_peak(uint64_t /*bytes_requested*/) {
  if (!scan_newest_.load(std::memory_order_relaxed)) return 0;
  std::unique_lock<std::recursive_mutex> lock = allocator_lock();
  if (!lock.owns_lock()) return 0;
  RoomTimer timed(engine_->stats(), clock_);  // Note [Host work in op times]
  evicted_bytes_in_call_ = 0;
  // Else no op ran since the last, or not enough for its cost: Note [Scan credit].
  if (scan_earned(dead_scan_ops_)) scan_for_dead();
  // Note [Dead pinned storages at a new peak]
  const bool died = deaths_ != full_collect_deaths_;
  const uint64_t dead_pinned = pinned_dead_bytes_ + (died ? pinned_dead_kept_bytes_ : 0);
  if (dead_pinned < kSmallPinnedBytes) return evicted_bytes_in_call_;
  if (pinned_dead_large_bytes_ > 0 || (died && pinned_dead_kept_large_bytes_ > 0) ||
      full_collect_earned(kScannedPerOp))
    collect(/*full=*/true);
  else if (dead_scan_ops_ != ops_recorded_)
    scan_for_dead();  // what the full collect would have scanned
  return evicted_bytes_in_call_;
}

// Note [Moving storages]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Under a reserved limit the caching allocator may ask to move live blocks so that a
// segment can go back (Note [Compaction] in allocator/caching_allocator.cpp). A storage
// moves as it is rematerialized: its StorageImpl takes a DataPtr to the new block, so every
// view, snapshot and alias sees the new address, and the bytes are the same (a memcpy),
// so results stay bit-identical. What may move is what a remat may refill elsewhere and
// more: a storage lineage knows (the block's owner), material, that no running op or
// remat holds (not locked in the engine), pinned or not (a parameter, an input batch).
// Not locked is not enough: an op that overwrites a storage whole (Note [Overwrite]) runs
// with it unlocked, so that it is not refilled, and writes it all the same: moved while
// the op ran, it was written at its old address (the 3-layer transformer at a 74M budget
// and a 76M reserved limit crashed in dropout, reading through a null pointer, in 4 of 6
// runs; 6 of 6 passed once such storages stayed). They are listed while their op runs
// (unlocked_targets_) and never move.
// What must not: an address someone was given. The allocator marks such a block unmovable
// until it is freed: a storage pinned for raw access (numpy, `data_ptr()` outside a raw
// scope; inside one the storage is locked), the dense parts of a sparse tensor, and every
// tensor a non-aten op reads or writes (c10d's collectives hand their tensors to a gloo
// thread that runs after the op has returned). Blocks whose owner lineage does not know
// (an op's outputs before they are recorded, tensors no recorded op has read) do not move.
// A storage may die on another thread at any moment, and its deleter then frees its block,
// which waits for the allocator's mutex: repointing it under that mutex would free the
// old block twice. So the storages are held (a strong reference each) before the
// allocator is called, and let go after it returns, when a last reference dropping frees
// the new block as usual. Only with `compact` (default on) and a reserved limit: with no
// limit the host's allocator never runs short of a segment, and nothing moves.
uint64_t Lineage::compact(uint64_t bytes_requested) {
  if (!config_.compact) return 0;
  // Note [Composites that read past the dispatcher] in dispatch_hook.cpp
  if (raw_composites_.load(std::memory_order_acquire) > 0) return 0;
  std::unique_lock<std::recursive_mutex> lock = allocator_lock();
  if (!lock.owns_lock()) return 0;
  struct Mover final : BlockMover {
    std::unordered_map<uint64_t, c10::intrusive_ptr<c10::StorageImpl>> held;  // owner -> storage
    c10::DeleterFnPtr deleter = nullptr;
    bool movable(uint64_t owner, void* ptr) override {
      auto it = held.find(owner);
      return it != held.end() && it->second->data() == ptr;
    }
    void moved(uint64_t owner, void* /*from*/, void* to) override {
      torch_compat::repoint_storage(*held.at(owner), to, deleter);
    }
  } mover;
  mover.deleter = our_deleter_;
  for (StorageId s : active_) {
    if (storages_[s].discarded || !engine_->is_material(s) || engine_->is_in_use(s)) continue;
    c10::intrusive_ptr<c10::StorageImpl> impl = storages_[s].impl.lock();
    if (impl && impl->data() && is_ours(*impl) &&
        std::find(unlocked_targets_.begin(), unlocked_targets_.end(), impl.get()) ==
            unlocked_targets_.end())
      mover.held.emplace(Engine::owner_of(s), std::move(impl));
  }
  return engine_->compact_allocator(bytes_requested, mover);  // tells the timeline too
}

// DTR_DEBUG >= 1, when nothing more can be evicted: every material storage the engine
// knows, to tell what holds the memory (pinned, locked by the op running, dead).
void Lineage::print_storages() const {
  std::fprintf(stderr, "dtr: nothing more to evict; material storages (bytes, state, op):\n");
  for (StorageId s : active_) {
    if (!engine_->is_material(s)) continue;
    const OpRec& r = ops_[engine_->op_of(engine_->storage_tensors(s)[0])];
    auto impl = storages_[s].impl.lock();
    const char* where = !impl ? " freed" : is_ours(*impl) ? "" : " outside";
    std::fprintf(stderr, "  s%u %llu%s%s%s%s %s\n", s,
                 static_cast<unsigned long long>(engine_->storage_size(s)),
                 engine_->is_pinned(s) ? " pinned" : "", engine_->is_locked(s) ? " locked" : "",
                 storages_[s].dead ? " dead" : "", where,
                 r.op ? r.op->schema().name().c_str() : "(constant)");
  }
}

// Note [Results outside the allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op recorded for its results may allocate them elsewhere than through PyTorch's CPU
// allocator: under the qnnpack engine, the quantized ops (Note [Pure foreign ops] in
// dispatch_hook.cpp) and quantize_per_tensor take theirs from c10's mobile allocator, which
// nothing can replace. Evicting such a result would free none of the budget, so it is
// pinned while it lives, and it is not in the allocator's counts either: a program that
// keeps such results grows past its budget with no out-of-memory error to say so. Under a
// budget the first one prints a warning, once a run, naming the op;
// dtr.outside_bytes.current counts them (Note [Memory outside the allocator]). Such a
// result whose memory another deleter frees (is_external: torch.from_file(shared=True)'s
// mapping, which another process or mapping may write) is exposed as an external constant
// is (Note [Writes outside the dispatcher]); until 2026-12-07 its readers were remade from
// the changed file without a word.
void Lineage::warn_outside(const c10::OperatorHandle& op, const at::Tensor& result) {
  if (warned_outside_ || budget_bytes_ == kUnlimitedBytes) return;
  warned_outside_ = true;
  const std::string name = op.schema().name();
  const uint64_t nbytes = result.storage().nbytes();
  std::string hint;
  if (result.is_quantized())
    hint =
        " Under the qnnpack engine quantized ops allocate their own results; "
        "torch.backends.quantized.engine = \"onednn\" (or \"fbgemm\" where built) "
        "allocates them through dtr.";
  std::fprintf(stderr,
               "dtr: warning: %s returned %s that dtr's allocator did not allocate; such results "
               "are outside the budget and never evicted (dtr.outside_bytes.current counts "
               "them).%s\n",
               name.c_str(), format_bytes(nbytes).c_str(), hint.c_str());
}

// Note [Memory outside the allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A constant whose memory our allocator did not make (from_numpy, a storage made before
// the library was installed, one torch.UntypedStorage allocated: Note [Storages Python
// allocates] in dispatch_hook.cpp) is pinned in the engine like any constant, and so is a
// dead pinned storage PyTorch freed that no scan has found yet (Note [Freed pinned
// storages] in collector.cpp). Neither is among the allocator's allocated bytes, which the
// out-of-memory message splits into pinned, in use, evictable and untracked. So the
// allocator, which asks only when it is out of memory, is told the unevictable bytes less
// those, found by a walk over the storages. The engine's own stats (dtr.pinned_bytes)
// still count them; dtr.outside_bytes.current counts the live ones, with the results of
// Note [Results outside the allocator].
uint64_t Lineage::outside_bytes(bool freed) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  uint64_t outside = 0;
  for (StorageId s : active_) {
    if (!engine_->is_material(s) || !(engine_->is_pinned(s) || engine_->is_locked(s))) continue;
    auto impl = storages_[s].impl.lock();
    if (impl ? !is_ours(*impl) : freed) outside += engine_->storage_size(s);
  }
  return outside;
}

uint64_t Lineage::pinned_bytes() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const uint64_t unevictable = engine_->unevictable_bytes();
  return unevictable - std::min(unevictable, outside_bytes(/*freed=*/true));
}

// Note [Small storages]: the advice, where op results pinned for their size could make the
// room asked for and hold a sixteenth of the pinned bytes or more (the deep, narrow MLP at
// 0.8: 1.5 of 10.6 MiB, the rest its parameters and gradients). The bound it suggests is a
// power of two at or under the size of the storages that hold half of those bytes, the
// larger ones first.
std::string Lineage::oom_advice(uint64_t bytes_requested) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<uint64_t> sizes;
  uint64_t small = 0;
  for (StorageId s : active_) {
    if (!storages_[s].small || storages_[s].dead || !engine_->is_material(s) ||
        !engine_->is_pinned(s) || engine_->storage_size(s) == 0)
      continue;
    sizes.push_back(engine_->storage_size(s));
    small += sizes.back();
  }
  const uint64_t pinned = engine_->unevictable_bytes();
  if (small < bytes_requested || small < pinned / 16) return {};
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  uint64_t half = 0, bound = 1;
  for (uint64_t size : sizes) {
    half += size;
    if (2 * half >= small) {
      while (2 * bound <= size) bound *= 2;
      break;
    }
  }
  const std::string value =
      bound >= 1024 ? std::to_string(bound / 1024) + "K" : std::to_string(bound);
  return "lower option min_evictable (now " + format_bytes(min_evictable_bytes(config_)) +
         "), as with DTR_CONF=min_evictable:" + value + ": " + format_bytes(small) +
         " of the pinned bytes are op results under it, which are never evicted (Note "
         "[Small storages])";
}

uint64_t Lineage::evictable_bytes() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return engine_->evictable_bytes();
}

uint64_t Lineage::in_use_bytes() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return engine_->in_use_bytes();
}

Status Lineage::pin_tensor(TensorId t) {
  if (!engine_->is_pinned(engine_->storage_of(t))) recording_->pin(t);
  return engine_->pin(t);
}

// --- DTR_TRACE, DTR_TIMELINE: Note [Recording a trace] in recording.cpp -------------------------

void Lineage::write_recordings() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  recording_->write_files();
}

void Lineage::hold_for_raw_access(const at::Tensor& tensor, RawHold* held) {
  if (!tensor.defined() || !tensor.has_storage() || tensor.device().type() != c10::DeviceType::CPU)
    return;  // lineage knows CPU storages only
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  const StorageId s = lookup(impl);
  if (s != kNoId) {  // else never evicted: nothing to refill or lock
    const TensorId t = storages_[s].current;
    const Status status = held ? engine_->lock_tensors({t}) : pin_tensor(t);
    if (!status.ok()) throw_status(status);
    if (held) {
      held->locked.push_back(t);
      held->storages.push_back(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl));
      return;
    }
  }
  // Pinned for good: the address is handed out and must not move (Note [Moving storages]),
  // and the program may write through it (Note [Writes outside the dispatcher]).
  if (held || !impl->data()) return;
  allocator_.set_unmovable(torch_compat::storage_address(*impl));
  if (impl->nbytes() == 0) return;
  if (s == kNoId) {  // exposed once an op reads it
    if (!is_external(*impl))
      remember_exposed(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl));
    return;
  }
  if (storages_[s].exposed) return;
  storages_[s].exposed = any_exposed_ = true;
  // The ops that read it so far read what it holds now (it was not exposed, so they have
  // no fingerprint of it): they get their fingerprints here.
  for (const auto& [op, k] : storages_[s].readers) {
    OpRec& r = ops_[op];
    if (!r.args.empty())
      r.fingerprints.emplace_back(r.input_slots[k], fingerprint_at(r.args, r.input_slots[k]));
  }
}

bool Lineage::adopt_default_storage(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return false;
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  // May evict to make room, or throw out of memory.
  if (!torch_compat::move_to_cpu_allocator(*impl)) return false;
  const StorageId s = lookup(impl);
  if (s != kNoId) {
    set_block_owner(s);
    if (history_)
      history_->set_category(reinterpret_cast<uintptr_t>(impl->data()), MemoryCategory::parameter);
  }
  return true;
}

void Lineage::release_raw_access(RawHold& held) {
  {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    engine_->unlock_tensors(held.locked);
    held.locked.clear();
  }
  // Outside the lock, as when Python drops a tensor: a storage let go here may die now.
  held.storages.clear();
}

// --- lineage.h ---------------------------------------------------------------------------------

pid_t loader_pid = 0;

void write_recordings_at_exit() {
  if (Lineage* lineage = the_lineage())
    if (getpid() == loader_pid) lineage->write_recordings();
}

void warn_ratio_budget_at_exit() {  // Note [Ratio budgets]
  if (Lineage* lineage = the_lineage())
    if (getpid() == loader_pid) lineage->warn_ratio_budget_unapplied();
}

void start_lineage(const Config& config, CachingAllocator& allocator, MemoryHistory* history,
                   std::shared_ptr<const PlanHints> plan) {
  if (the_lineage()) return;
  auto* lineage = new Lineage(config, allocator, history, std::move(plan));  // never deleted: Note [Immortal allocator]
  lineage_ptr.store(lineage, std::memory_order_release);
  loader_pid = getpid();
  // Note [Outputs at exit] in exit_writers.cpp
  if (!config.trace.empty() || !config.timeline.empty()) write_at_exit(write_recordings_at_exit);
  if (config.budget.kind == Budget::Kind::ratio) write_at_exit(warn_ratio_budget_at_exit);
  if (register_dispatch_hook()) {
    enable_hook_on_this_thread(true);
    set_allocation_observer(&record_if_python_thread);  // Note [Threads]
  }
}

bool lineage_started() { return the_lineage() != nullptr; }

Stats lineage_stats() {
  Lineage* lineage = the_lineage();
  if (!lineage) return Stats{};
  std::lock_guard<std::recursive_mutex> lock(lineage->mutex());
  Stats stats = lineage->engine().stats();
  // Note [Memory outside the allocator]
  stats.outside_current = lineage->outside_bytes(/*freed=*/false);
  return stats;
}

void find_dead_storages() {
  if (Lineage* lineage = the_lineage()) lineage->scan_for_dead();
}

void set_recording(bool on) { recording_on = on; }
bool recording() { return recording_on; }

void collect_lineage() {
  if (Lineage* lineage = the_lineage()) lineage->collect(/*full=*/true);
}

void lineage_budget_changed(uint64_t budget_bytes) {
  if (Lineage* lineage = the_lineage()) lineage->budget_changed(budget_bytes);
}

void begin_lineage_optimizer_step() {
  if (Lineage* lineage = the_lineage()) lineage->begin_optimizer_step();
}

void end_lineage_optimizer_step() {
  if (Lineage* lineage = the_lineage()) lineage->end_optimizer_step();
}

void mark_lineage_step() {
  if (Lineage* lineage = the_lineage()) lineage->mark_step();
}

std::string policy_status() {
  Lineage* lineage = the_lineage();
  if (!lineage) return std::string();
  std::lock_guard<std::recursive_mutex> lock(lineage->mutex());
  return lineage->engine().heuristic().status();
}

std::string plan_source() {
  Lineage* lineage = the_lineage();
  return lineage && lineage->plan() ? lineage->plan()->source : std::string();
}

std::string plan_departure() {
  Lineage* lineage = the_lineage();
  if (!lineage || !lineage->guide()) return std::string();
  std::lock_guard<std::recursive_mutex> lock(lineage->mutex());
  return lineage->guide()->departure();
}

}  // namespace dtr::torch_integration
