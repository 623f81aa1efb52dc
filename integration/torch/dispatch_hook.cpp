// dispatch_hook.cpp: the dispatcher fallback that sees every op below autograd, decides
// how each op is treated (view, compute, opaque), and hands the op to the lineage
// (lineage.cpp) before and after running it. Also the dtr:: ops and the Python-level guard
// against raw access to evicted tensors.
//
// Note [Dispatch key]
// ~~~~~~~~~~~~~~~~~~~
// The fallback sits on a dispatch key that core PyTorch leaves unused, included in the
// thread-local dispatch key set of every thread that records (ARCHITECTURE.md "Proven" 1):
// `Fake` in 1.13, which sits below autograd, so the fallback sees what autograd calls
// (convolution, addmm, threshold_backward): the right level for lineage. The fallback
// excludes its own key while the op runs, so whatever the op calls inside is not seen.
// The key is one constant (kDtrKey, compat.h): it may differ between versions.
// Registering a second fallback on a key calls std::terminate, so registration checks
// first and happens once per process.
//
// Note [Threads]
// ~~~~~~~~~~~~~~
// The key is included per thread. A thread without it runs ops past the fallback: on an
// evicted input the kernel would read a storage with no data (a crash, measured). The
// loading thread includes it at start; c10 carries the thread-local key set into autograd
// and at::launch threads; and the Python code of Note [Raw access] installs a
// threading.setprofile hook that, as each thread the threading module starts makes its
// first call, includes the key through torch.ops.dtr.record_on_this_thread, then restores
// whatever profile hook was set before. Threads started otherwise (_thread, C++ threads
// of an extension) do not record, nor do threads started before the library was loaded
// by torch.ops.load_library; nor any thread after the program replaces the threading
// profile hook itself. As a fallback, a Python thread that allocates a tensor without the
// key gets it then (record_if_python_thread, from the allocator hook): it records from
// its next op on, so only ops before its first allocation can meet an evicted input
// unseen. That also covers a program whose first ops run on a worker thread, before any
// op ran the Python code that installs the hook.
//
// Note [Reads of evicted storages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op that runs past the fallback (a thread that does not record, above) on an evicted
// input reads through the storage's null data pointer plus an offset, and the process
// died of SIGSEGV without a word. So, once the fallback is registered, the library
// watches SIGSEGV and SIGBUS: a fault at an address below the largest storage it ever
// evicted (an offset from null) gets one line on stderr that names the likely cause and
// what to do, then the handler that was there before (Python's faulthandler, or the
// default: the process dies as before) runs as it would have. The handler only calls
// write(2), nanosleep and sigaction, which are safe in a signal handler. The worker
// threads of one parallel op fault together: the others wait for the first to finish
// the line (test_threads.py once saw it cut after "memory at "). A null dereference elsewhere
// in the process can look the same, so the line says "probably".
//
// Note [Never recompute]
// ~~~~~~~~~~~~~~~~~~~~~~
// Opaque ops run once and are never recomputed: their outputs stay pinned (the result of
// torch.multinomial, or of torch.randn under no_grad, is pinned; the ops that read it stay
// recomputable). They are: ops outside aten (a profiler op returns a tensor that owns a C++
// object; collectives), except Note [Pure foreign ops]; ops tagged nondeterministic_seeded
// (except Note [Seeded ops], [Seeded factories] and [Seeded like factories], in grad mode)
// or nondeterministic_bitwise, whose results may still be recorded as another call's
// (Note [Observed RReLU]); the empty* family (its values are whatever memory held);
// the resize family and set_ (they change a storage, not its values; a grown storage's
// tail is whatever memory held); in-place ops that write more than one tensor (a foreach
// optimizer step: a remat would apply the step again to every target that is still
// material), except Note [Observed fake quantization]; and ops that return no tensor.
// A written storage of an opaque op is pinned (Note [Mutation] in lineage.cpp).
// Except seeded fills (Note [Seeded ops]).
//
// Note [Thread-order results]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A remat must give the bits the op first gave, and a few CPU kernels do not give the same
// bits twice: on several intra-op threads, 1.13's index_put_ and put_ with accumulate=True
// (index_put_ is the backward of advanced indexing, `x[idx]`, through _index_put_impl_) add
// the values of repeated indices in an order that changes from call to call (how the
// threads are scheduled decides it). On one thread, or with
// torch.use_deterministic_algorithms(True), they repeat themselves. No tag says so in 1.13
// (nondeterministic_bitwise is on none of them), so they are named below, and such a call
// on several threads outside deterministic mode is not recorded: what it makes is a
// constant, pinned while it lives, as an opaque op's result is. Before, such a result was
// evicted and remade with other low bits: a program could read one tensor twice and see two
// values (tests/torch/test_thread_order.py). These are the CPU ops of that kind in the list
// of torch.use_deterministic_algorithms, and probes of 32 CPU ops found no others
// (index_add_, scatter_add_, scatter_reduce, embedding_dense_backward, the pooling,
// upsampling, normalization and convolution backward ops repeated themselves). The list's
// other CPU entries, index_put_ and put_ without accumulate, index_copy_ and max_unpool,
// change only where the indices repeat, which PyTorch leaves undefined: they stay recorded,
// since pinning them would pin every `x[idx] = v`, index_copy_ and SegNet unpooling for a
// case PyTorch does not define (a bool mask, `x[mask] = v`, never repeats). A call recorded
// on one thread and remade after the program raised its thread count runs on one thread
// again (the count is part of Note [Op context]). The ops that read such a result stay
// recomputable. A graph network's message passing (`h[src]`, then index_add_)
// pins the gradients of its gathers while they live: a probe ran at 0.5 of its peak on two
// threads, where on one it ran at 0.4 as before (docs/pytorch.md, "Eviction inside
// PyTorch").
//
// Note [Pure foreign ops]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Ops outside aten are opaque because nothing says what they do: a profiler op returns a
// tensor that owns a C++ object, a collective hands its tensors' addresses to another
// thread. torchvision's RoI ops, deform_conv2d and nms are functions of their inputs whose
// CPU kernels give the same bits on every call (tests/torch/test_torchvision_ops.py calls
// each again on two threads), so the ops named below are recorded as aten's are. A
// detection model is why: Faster R-CNN's MultiScaleRoIAlign writes each feature level's
// roi_align result into one zeros tensor (49 MiB at 2 images: 1024 RoIs x 256 x 7 x 7), and
// the gradients of roi_align's backward are added into the features' gradients. Opaque,
// those results were constants, and when they died the tensors written from them were
// pinned for them (Note [Dead constants] in lineage.cpp): tests/torch/scripts/detection.py
// ran out of memory at 0.6 of its peak with 263 MiB pinned, and trains bit-identically
// there now.
// quantized::linear_dynamic (the forward of torch.ao.quantization.quantize_dynamic's
// Linear) is one too: it quantizes its input with the input's own range, multiplies by the
// prepacked int8 weight and dequantizes, and gave the same bits in 20 calls of 20 on two
// threads here (the onednn engine; tests/torch/test_workflows.py checks it wherever it
// runs). Its weight argument is a packed-parameters object, not a tensor: the recorded call
// holds it, and nothing changes one in place (loading a state_dict makes a new one). An
// inference program keeping each layer's output (6 layers 512 wide, 2048 rows) ran out of
// memory at 0.6 of its peak with 30 MiB pinned, each result a constant; it runs there now.
// The ops of a statically quantized model (torch.ao.quantization's convert) are functions
// of their inputs, packed weights and output scale too: the convolutions (1d, 2d, 3d, with
// and without a fused ReLU, and transposed), linear, add, mul and cat (with and without a
// fused ReLU, and by a scalar), the batch, layer, group and instance norms, hardswish,
// elu, celu, sigmoid, threshold, and the byte embeddings (embedding and embedding bag);
// also linear_relu_dynamic. Each gave the same bits in 20 calls of 20 on two threads
// under both engines here (onednn, the default, and qnnpack, which refused the probe's
// conv_transpose3d shape; tests/torch/test_workflows.py checks the engine it runs). The
// names hold for every overload, so an overload that writes an argument (add.out,
// mul.Scalar_out) stays opaque, as an op outside aten did before.
// quantized::leaky_relu is not named: its `inplace` argument writes its input with no
// alias annotation in the schema, which nothing here could see. qnnpack's packed
// weights are packed at a call, with the input's scale (QnnpackUtils.h in PyTorch's
// sources), and packed again when a call brings another: what is packed follows the
// call's inputs, so a remat gets what the first call got. Under qnnpack the results do not
// come from dtr's allocator (a program keeping them peaks at 14.7 MiB in dtr's count, 46.4
// MiB under onednn), so they are outside the budget and pinned, as any memory it did not
// make (Note [Results outside the allocator] in lineage.cpp warns of them). An inference program keeping each layer's quantized output (onednn) ran out of
// memory at 0.7 of its peak with 24 MiB of those results held; it runs at 0.3 now.
//
// Note [Seeded ops]
// ~~~~~~~~~~~~~~~~~
// A seeded op's output is a function of its inputs and of the state of the generator it
// draws from. In-place fills that overwrite their tensor whole with draws (bernoulli_,
// uniform_, normal_, random_, exponential_, cauchy_, log_normal_, geometric_, each with a
// `Generator?` argument) are recorded like zero_ (Note [Overwrite] in lineage.cpp), and the
// recorded call keeps, in place of that argument, a copy of the generator's state taken
// just before the op drew (the default CPU generator's when the argument is None). A remat
// passes a fresh copy of it as the op's explicit generator: the CPU kernels draw the same
// numbers in the same order from the same state, so the values are the same bits, and the
// program's own generator is not advanced (what torch.utils.checkpoint does with
// preserve_rng_state). This is what makes a dropout mask recomputable: 1.13's CPU dropout
// is empty_like, bernoulli_(1 - p), div_ and mul, and without it every mask was pinned
// until its backward (60 MiB of the 130 MiB budget of the 6-layer transformer at 0.5x).
// Only in grad mode: a fill under torch.no_grad() is a parameter's initialisation
// (nn.init), which must stay opaque and pinned, as before. Recorded, the parameters became
// recomputable storages that each optimizer step writes in place (Note [Mutation]), and
// runs that pass at their tested budgets ran out of memory (the CNN at 0.7 and 0.6,
// resnet18 at 0.55, the DataLoader script, DDP), with parameters locked in the material
// list; the exact chain was not analysed.
// Other seeded ops that return fresh draws are Note [Seeded factories] and Note [Seeded
// like factories]; the rest (native_dropout, multinomial, ...) stay opaque. A fill that
// does not cover its storage is recorded as a new version (Note [Mutation]), which replays
// the same way. Cost: a copy of the generator (about 5 KB for the CPU one) per recorded fill.
//
// Note [Seeded factories]
// ~~~~~~~~~~~~~~~~~~~~~~~
// torch.randn, rand, randint, randperm, and the functional normal and bernoulli return
// fresh draws: a synthetic input batch, noise a model adds inside its step. They are
// recorded as the fills are (Note [Seeded ops]: in grad mode only, with a copy of the
// generator's state taken before the op draws), so their outputs are evicted and made again
// instead of pinned while they live. normal and bernoulli take a `Generator?` argument;
// randn, rand, randint and randperm do not, but each has an overload that does (randn.
// generator, randint.low_generator: the same arguments with one `Generator?` more), and the
// recorded call is that overload with the copy in its place. The CPU kernels of the plain
// overloads call the same code with the default generator, so a remat draws the same bits,
// and the program's generators are not advanced. Overloads without such a twin (randn.names)
// stay opaque; the `_like` factories have none (Note [Seeded like factories]). A batch
// drawn with randn in grad mode is recorded too; the test scripts draw theirs under
// torch.no_grad(), as a loader's batch is data no remat can make again (docs/pytorch.md,
// "At 224x224").
//
// Note [Seeded like factories]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch.randn_like, rand_like and randint_like have no overload with a generator, and
// they are the common way to draw noise inside a step (a VAE's `std * randn_like(std)`, a
// diffusion loss's `randn_like(x0)`). Their 1.13 CPU kernels are empty_like followed by a
// seeded fill: normal_(0, 1), uniform_(0, 1), random_(low, high). In grad mode, for a
// strided CPU result, the fallback runs them as that pair itself, each through the
// dispatcher from the top, so the fill is recorded as Note [Seeded ops] records fills:
// with a copy of the generator, its result evictable and drawn again bit-identically, and
// without a dependence on `self`, whose shape, strides and dtype the empty_like has read.
// The pair draws the same bits as the kernel and leaves the generator where the kernel
// leaves it, for every memory format and dtype tried (tests/torch/test_seeded_ops.py runs
// them against the run without the library). Elsewhere (no_grad, CUDA, sparse) the op
// runs as before, opaque.
//
// Note [Batch norm]
// ~~~~~~~~~~~~~~~~~
// 1.13's native_batch_norm updates running_mean and running_var in place in training mode
// without an (a!) annotation. Those two are treated as written (so lineage that read them
// keeps their old values), and the recorded call gets no running stats: in training mode
// the output depends on batch statistics only, so a remat computes the same bits without
// touching the running stats again. In eval mode it reads them and writes nothing.
//
// Note [Observed fake quantization]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Quantization-aware training (torch.ao.quantization's default QAT qconfig) passes
// activations and weights through FusedMovingAvgObsFakeQuantize, whose op,
// _fused_moving_avg_obs_fq_helper, writes four tensors (the observer's running min and
// max, the scale and the zero point) and returns the fake-quantized tensor and its mask.
// An op that writes several tensors is opaque (Note [Never recompute]), so every
// fake-quantized activation was pinned while it lived: a 6-layer QAT CNN ran out of memory
// at 0.3 of its peak with 41 MiB pinned. The results depend on those writes only through
// the scale and zero point the op leaves: with fake quantization on, they are what
// _fake_quantize_per_tensor_affine_cachemask_tensor_qparams (per tensor) or
// fake_quantize_per_channel_affine_cachemask (per channel) returns for the input and
// those, as 1.13's kernel computes them; off, per tensor, the input's clone and a mask of
// ones, which the per-tensor op also returns given the flag. So the helper runs as an
// opaque op (its writes pin the four small tensors, as before), and then the fallback
// records that op's call, with the scale and zero point the helper left, as the maker of
// the helper's two results, without running it: the results can be evicted, and a remat
// runs the fake quantization alone. The next step's write of the scale keeps the old value
// for the recorded call (Note [Mutation] in lineage.cpp). Per channel with fake
// quantization off, under a mode (Note [Dispatch modes]) or with recording off, the
// results stay opaque. tests/torch/test_fake_quant.py checks the ops' bits against the
// helper's and trains a QAT model bit-identically under budgets.
//
// Note [Observed RReLU]
// ~~~~~~~~~~~~~~~~~~~~~
// RReLU in training mode (nn.RReLU, F.rrelu) calls rrelu_with_noise(self, noise, lower,
// upper, training=True), which draws a slope for each element of self at or under zero,
// writes the slopes (and 1 for the rest) to `noise`, a fresh contiguous empty_like, and
// returns self times them. A seeded op that writes an argument is opaque, so its result
// was pinned while it lived: a helper's probe with three RReLUs (2026-12-03) ran out of
// memory at 0.6 of its peak, where the same model with LeakyReLU trained at 0.5. Once the
// op has run, its result is mul(self, noise) bit for bit: 1.13's CPU kernel computes
// self[i] * r in the element type and stores r in noise[i], and x * 1 is x (NaN payloads,
// -0.0 and infinities included; checked for float and double by tests/torch/test_rrelu.py;
// bfloat16 stays opaque, as mul there gives a NaN another payload). So the op runs as
// before (its draw and its write pin `noise`, which autograd saves for the backward pass
// anyway), and the fallback records mul(self, noise) as the maker of its result, as for
// Note [Observed fake quantization]: the result can be evicted, and a remat multiplies.
// Only where self and noise are contiguous, of one shape and dtype and not aliased: the
// kernel walks both in memory order, and a strided self would give mul another layout.
// The in-place form (nn.RReLU(inplace=True), rrelu_with_noise_) overwrites self, which
// the call would read, and stays opaque; so does eval mode (training=False: a leaky_relu
// that writes nothing, never recorded since the op is seeded by name). The recorded cost
// is the op's own time, draws included, though a remat only multiplies.
//
// Note [Raw access]
// ~~~~~~~~~~~~~~~~~
// `.numpy()`, `np.asarray`, `.tolist()`, `data_ptr()`, `storage()` and DLPack read a
// tensor's memory without the dispatcher, as do `apply_`, `map_` and `map2_` (a Python
// callable over the elements, in C++); on an evicted tensor they would see no data (an
// uninitialised buffer, silently, or a null pointer). The first op the fallback sees in a
// Python process installs Python-level guards on those torch.Tensor methods, and on the
// function torch.utils.dlpack.to_dlpack (torch._C._to_dlpack), which is rebound in every
// module that holds it, as a script's `from torch.utils.dlpack import to_dlpack` made
// before that first op does (until 2026-11-29 neither to_dlpack nor apply_ was guarded:
// on an evicted tensor they read a null pointer, and the process died). Each first calls
// torch.ops.dtr.pin_raw(self), which refills the storage if evicted and pins it for good
// (the memory is exported: it must not move or vanish while numpy holds it). The guard is
// installed through the CPython API found in the process (no link to libpython), and the
// Python code reports success through torch.ops.dtr.raw_access_guarded. C++ code that
// reads data_ptr() of a tensor it did not get through the dispatcher is not covered.
//
// Note [Composites that read past the dispatcher]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CompositeImplicitAutograd op runs above the fallback's key: the fallback sees the ops
// it calls, not the op itself, so its tensor arguments are neither refilled nor locked.
// Some such kernels read an argument's memory directly, past the dispatcher: the packed
// sequence ops read batch_sizes (_pad_packed_sequence, _pack_padded_sequence_backward,
// the packed gru, lstm, rnn_tanh and rnn_relu), ctc_loss its lengths, and a few more
// (torch_compat::kRawReadComposites, from a helper's audit of 1.13.1's libtorch_cpu:
// its sources, a walk of the binary's calls and a harness that evicted or moved every
// storage at each op). An argument evicted before the read failed the op ("its data is
// not allocated yet", the backward pass of a sequence of more than 2048 steps, whose
// batch_sizes is over min_evictable); one evicted or moved while the op ran, between the
// ops it calls that allocate, was read from freed memory: the packed GRU of gru_packed.py
// at min_evictable:0 failed with "shape '[1, 5515247307648, 384]' is invalid" in 5 runs
// of 8 beside a busy loop, and the audit's harness got a silently wrong ctc_loss (the
// default reduction reads target_lengths again after _ctc_loss). So each of those ops
// gets a kernel of ours on AutogradCPU, where the composite would run, and on the
// fallback's key, where it runs without autograd keys: it refills and locks the listed
// arguments (as a raw scope holds a storage, Note [Raw scopes]), keeps compaction off
// while it runs where it also writes results of its own directly (_pad_packed_sequence
// its lengths, max_pool1d its output: not the RNNs, which run for a whole layer, so
// that compaction would be off for most of a run), and runs the composite's own kernel
// below the fallback's key, whose calls dispatch as before. An argument it writes
// directly (the Sobol engine's state) is pinned for good, as apply_'s self is (Note [Raw
// access]), and so are its results where it wrote results made by recomputable ops (the
// Sobol draw's quasi, a clone it then changes): a remat would remake them without the
// writes. A
// SobolEngine whose state was evicted failed its next draw with "its data is not
// allocated yet"; refilled by a remat of its torch.zeros, it would have drawn from zeros.
// An op that is no longer composite in a later PyTorch, or has a kernel of its own on
// those keys, is left alone. Results of ops a composite calls and then reads directly
// are kept from moving where the op is listed (linalg_eigvals without grad, which the
// audit's harness saw return zeros after a move), not from being evicted; the audit
// found one such read of a result that can be large enough to evict, in
// sparse_coo_tensor's index bounds, which is not covered.
//
// Note [Raw scopes]
// ~~~~~~~~~~~~~~~~~
// Pinning for good is right where memory is exported: numpy, `__dlpack__` and `data_ptr()`
// hand out the address, which may be read at any time after. It is too much where the
// read ends with a call: `.tolist()` copies out, `torch.save` pickles and then writes the
// storages before it returns, `copy.deepcopy` clones. Before, each pinned what it read
// until the tensor died, so a loop that saved live activations filled its budget with
// pins and ran out of memory (tests/torch/test_raw_access.py). The guard now runs
// Tensor.tolist, Tensor.__deepcopy__ and torch.serialization's _save and _legacy_save
// inside a raw scope (torch.ops.dtr.begin_raw_scope / end_raw_scope; per thread, nested
// scopes end with the outermost). In a scope, `storage()`, `untyped_storage()`,
// `_typed_storage()`, `data_ptr()` (pickling a tensor compares it with 0) and `tolist()`
// call torch.ops.dtr.hold_raw, which refills the storage and locks it, with a reference
// so that it is not found dead, until the scope ends; numpy, `__array__` and `__dlpack__`
// make objects that may outlive the scope and still pin for good. Outside a scope
// hold_raw pins, as pin_raw does: the storage object or address it returns may be kept
// and read later. pickle.dumps of a tensor is scoped in two parts (2026-12-02; before, it
// pinned the tensor for good): Tensor.__reduce_ex__ takes the storage in a scope and
// returns it, and pickle then reduces the storage itself, after that scope ended, by
// TypedStorage.__reduce__ (or UntypedStorage's), which saves its bytes with torch.save. The
// guard runs that in a scope too, holding the storage through a uint8 tensor set_ to it, so
// a storage evicted in between is refilled before its bytes are read.
//
// Note [Storages Python allocates]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torch.UntypedStorage(n), TypedStorage(n) and a storage's clone() allocate from
// c10::GetDefaultCPUAllocator(), not from the allocator c10::SetCPUAllocator installed
// (checked on 1.13: 0 bytes of a 1 MiB copy.deepcopy reached our allocator). So
// copy.deepcopy of a plain tensor, which clones its storage, made memory outside the
// budget and the allocator's stats: `best = copy.deepcopy(model.state_dict())` held a
// second copy of the model that no budget capped, and lineage counted it as a pinned
// constant, so the out-of-memory message gave more pinned bytes than allocated ones. The
// guard hands each Tensor.__deepcopy__ result to torch.ops.dtr.adopt_storage, which moves
// a storage PyTorch's default allocator made (told by its DataPtr's deleter) into ours:
// one allocation under the budget (which may evict, or raise out of memory) and a copy;
// the new storage was made inside deepcopy, so nothing else holds its address yet. A
// Parameter's deepcopy clones through the dispatcher and is ours already. Storages made
// directly with torch.UntypedStorage stay outside, as from_numpy memory does. With
// remat:False (no lineage) the guard is installed too (install_storage_guard: the
// fallback runs until the first op has installed it), so that a baseline run's peak, of
// which budgets are fractions, counts the same copies as a run under a budget.
//
// Note [Dispatch modes]
// ~~~~~~~~~~~~~~~~~~~~~
// Python's dispatch key sits below dtr's. It is in an op's key set when a
// TorchDispatchMode is active (or a tensor subclass defines __torch_dispatch__), and then
// the op runs Python code between the fallback and the kernel: code that may return
// other values than the kernel's, and that runs its own ops with dtr's key excluded (the
// fallback's guard), so they neither refill what they read nor are recorded. A probe
// (2026-11-30) found three failures of recording such ops as usual:
//  - a mode that rounded each result to bfloat16 precision trained to other parameters
//    under a budget (a remat runs the kernel, not the mode: Note [Op context] in
//    lineage.cpp), silently;
//  - the same mode in a longer loop aborted on "rematerializing an op whose lineage was
//    dropped", or with heap corruption after an out-of-memory error;
//  - a NaN checker (torch.isnan(out).any() on each result) died on a null data pointer in
//    the first step: a view op went straight to the mode, whose own ops then read the view
//    of an evicted storage.
// So under Python's key no op is recorded, and every op, views included, has its inputs
// refilled and locked while it runs. What such an op makes is not recomputable (pinned
// once a recorded op reads it, as other memory lineage did not see), so a loop run
// entirely under a mode evicts only what was made outside it; results stay the kernel's
// and the mode's. Nor does the fallback run its own kernel for such an op (Note [Lean
// batch-norm backward] in compat.cpp): until 2026-12-01 a mode saw that kernel's empty,
// empty_like and zeros in place of native_batch_norm_backward, so one that changed that
// op's results trained to other parameters with the library loaded, budget or not.
// tests/torch/test_dispatch_modes.py.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_like.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <torch/library.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "integration/torch/cpu_allocator.h"
#include "integration/torch/exit_writers.h"
#include "integration/torch/lineage.h"
#include "integration/torch/lineage_impl.h"
#include "integration/torch/process_kind.h"

namespace dtr::torch_integration {

namespace {

// Note [Never recompute]: by name, without the overload.
const std::unordered_set<std::string>& never_recompute_names() {
  // clang-format off
  static const std::unordered_set<std::string> names = {
      "aten::empty",          "aten::empty_like",   "aten::empty_strided",
      "aten::new_empty",      "aten::new_empty_strided", "aten::_empty_affine_quantized",
      "aten::resize_",        "aten::resize_as_",   "aten::set_",
      "aten::resize",         "aten::resize_as",    "aten::_resize_output",
      "aten::_resize_output_",
      "aten::bernoulli",      "aten::bernoulli_",   "aten::native_dropout",
      "aten::rand",           "aten::rand_like",    "aten::randn",
      "aten::randn_like",     "aten::randint",      "aten::randint_like",
      "aten::randperm",       "aten::normal",       "aten::normal_",
      "aten::uniform_",       "aten::exponential_", "aten::geometric_",
      "aten::cauchy_",        "aten::log_normal_",  "aten::random_",
      "aten::multinomial",    "aten::poisson",      "aten::rrelu_with_noise",
      "aten::rrelu_with_noise_", "aten::_fused_dropout", "aten::_standard_gamma",
      "aten::_local_scalar_dense",
  };
  // clang-format on
  return names;
}

// Note [Pure foreign ops]: ops outside aten that are recorded as aten's are.
const std::unordered_set<std::string>& pure_foreign_names() {
  static const std::unordered_set<std::string> names = {
      "torchvision::roi_align",
      "torchvision::_roi_align_backward",
      "torchvision::roi_pool",
      "torchvision::_roi_pool_backward",
      "torchvision::ps_roi_align",
      "torchvision::_ps_roi_align_backward",
      "torchvision::ps_roi_pool",
      "torchvision::_ps_roi_pool_backward",
      "torchvision::deform_conv2d",
      "torchvision::_deform_conv2d_backward",
      "torchvision::nms",
      "quantized::linear_dynamic",
      "quantized::linear_relu_dynamic",
      "quantized::linear",
      "quantized::linear_relu",
      "quantized::conv1d",
      "quantized::conv1d_relu",
      "quantized::conv2d",
      "quantized::conv2d_relu",
      "quantized::conv3d",
      "quantized::conv3d_relu",
      "quantized::conv_transpose1d",
      "quantized::conv_transpose2d",
      "quantized::conv_transpose3d",
      "quantized::add",
      "quantized::add_relu",
      "quantized::add_scalar",
      "quantized::mul",
      "quantized::mul_relu",
      "quantized::mul_scalar",
      "quantized::cat",
      "quantized::cat_relu",
      "quantized::batch_norm2d",
      "quantized::batch_norm2d_relu",
      "quantized::batch_norm3d",
      "quantized::layer_norm",
      "quantized::group_norm",
      "quantized::instance_norm",
      "quantized::hardswish",
      "quantized::elu",
      "quantized::celu",
      "quantized::sigmoid",
      "quantized::threshold",
      "quantized::embedding_byte",
      "quantized::embedding_bag_byte",
  };
  return names;
}

// Note [Thread-order results]: by name; their `accumulate` argument says whether a call
// counts.
const std::unordered_set<std::string>& thread_order_names() {
  static const std::unordered_set<std::string> names = {
      "aten::index_put_", "aten::index_put", "aten::_index_put_impl_", "aten::put_", "aten::put",
  };
  return names;
}

// Note [Seeded ops]: in-place fills with draws, replayed from a copy of their generator.
const std::unordered_set<std::string>& seeded_fill_names() {
  static const std::unordered_set<std::string> names = {
      "aten::bernoulli_",   "aten::uniform_", "aten::normal_",     "aten::random_",
      "aten::exponential_", "aten::cauchy_",  "aten::log_normal_", "aten::geometric_",
  };
  return names;
}

// Note [Seeded factories]: ops that return fresh draws, replayed from a copy of their
// generator.
const std::unordered_set<std::string>& seeded_factory_names() {
  static const std::unordered_set<std::string> names = {
      "aten::randn",    "aten::rand",   "aten::randint",
      "aten::randperm", "aten::normal", "aten::bernoulli",
  };
  return names;
}

bool is_generator_type(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::OptionalType &&
         type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
}

// The index of the op's `Generator?` argument (the last, should there be several); -1 if
// it has none.
int16_t generator_argument(const c10::FunctionSchema& schema) {
  int16_t at = -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i)
    if (is_generator_type(schema.arguments()[i].type())) at = static_cast<int16_t>(i);
  return at;
}

// The index of the `Generator?` argument of `with`, when `with` takes exactly the
// arguments of `op` (names and types) plus that one; -1 otherwise.
int16_t inserted_generator(const c10::FunctionSchema& op, const c10::FunctionSchema& with) {
  const std::vector<c10::Argument>& a = op.arguments();
  const std::vector<c10::Argument>& b = with.arguments();
  if (b.size() != a.size() + 1 || op.returns().size() != with.returns().size()) return -1;
  int16_t at = -1;
  for (size_t i = 0, j = 0; j < b.size(); ++j) {
    if (at < 0 && is_generator_type(b[j].type()) && (i == a.size() || a[i].name() != b[j].name())) {
      at = static_cast<int16_t>(j);
      continue;
    }
    if (i == a.size() || a[i].name() != b[j].name() || *a[i].type() != *b[j].type()) return -1;
    ++i;
  }
  return at;
}

bool is_tensor_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (type->kind() == c10::TypeKind::ListType)
    return type->containedType(0)->kind() == c10::TypeKind::TensorType;
  return false;
}

OpInfo classify_op(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  OpInfo info;
  info.num_args = static_cast<uint16_t>(schema.arguments().size());
  info.num_returns = static_cast<uint16_t>(schema.returns().size());
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite()) info.write_args.push_back(static_cast<uint16_t>(i));
  }
  bool returns_alias = false, returns_all_written = info.num_returns > 0,
       returns_tensor = false;
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    returns_alias |= alias != nullptr && !alias->isWrite();
    returns_all_written &= alias != nullptr && alias->isWrite();
    returns_tensor |= is_tensor_type(ret.type());
  }
  const std::string& name = schema.name();
  // Note [Pure foreign ops]: by name, so for every overload; one that writes an argument
  // (quantized::add.out) stays opaque.
  if (name.rfind("aten::", 0) != 0 &&
      (!pure_foreign_names().count(name) || !info.write_args.empty())) {
    info.foreign = true;  // Note [Moving storages] in lineage.cpp
    return info;          // opaque
  }
  if (name == torch_compat::kObservedFakeQuant && info.num_args == 13 && info.num_returns == 2) {
    info.observed = Observed::fake_quant;  // Note [Observed fake quantization]
    return info;                           // opaque
  }
  if (name == torch_compat::kObservedRRelu && info.num_args == 6 && info.num_returns == 1) {
    info.observed = Observed::rrelu;  // Note [Observed RReLU]
    return info;                      // opaque
  }
  // resize_ carries the inplace_view tag, but it can give its tensor's storage new, larger
  // memory: a view op only where it does not (Note [Grown storages] in lineage.cpp).
  if (name == "aten::resize_") {
    info.resize = true;
    return info;  // opaque
  }
  if (op.hasTag(at::Tag::inplace_view) || (info.write_args.empty() && returns_alias)) {
    info.kind = OpKind::view;
    return info;
  }
  // Note [Seeded ops]
  if (seeded_fill_names().count(name) && op.hasTag(at::Tag::nondeterministic_seeded) &&
      !op.hasTag(at::Tag::nondeterministic_bitwise) && info.write_args.size() == 1 &&
      info.write_args[0] == 0 && returns_all_written) {
    info.generator_arg = generator_argument(schema);
    if (info.generator_arg >= 0) {
      info.kind = OpKind::compute;
      info.in_place = true;
      info.overwrites = true;
      info.packs_mask = name == "aten::bernoulli_";  // Note [Packed masks] in lineage.cpp
      return info;
    }
  }
  // Note [Seeded like factories]
  if (name == "aten::randn_like" || name == "aten::rand_like" || name == "aten::randint_like") {
    info.like_fill = name == "aten::randn_like"  ? LikeFill::normal
                     : name == "aten::rand_like" ? LikeFill::uniform
                                                 : LikeFill::random;
    return info;  // opaque where the fallback does not run it as its fill
  }
  // Note [Seeded factories]
  if (seeded_factory_names().count(name) && op.hasTag(at::Tag::nondeterministic_seeded) &&
      !op.hasTag(at::Tag::nondeterministic_bitwise) && info.write_args.empty() && !returns_alias &&
      info.num_returns == 1 && returns_tensor) {
    info.generator_arg = generator_argument(schema);
    bool tensor_args = false;
    for (const c10::Argument& a : schema.arguments()) tensor_args |= is_tensor_type(a.type());
    if (info.generator_arg < 0 && !tensor_args) {
      // randn -> randn.generator, randint.low -> randint.low_generator
      const std::string& overload = schema.overload_name();
      const c10::optional<c10::OperatorHandle> with = c10::Dispatcher::singleton().findSchema(
          {name, overload.empty() ? "generator" : overload + "_generator"});
      if (with) {
        info.generator_arg = inserted_generator(schema, with->schema());
        if (info.generator_arg >= 0) info.replay_op = *with;
      }
    }
    if (info.generator_arg >= 0) {
      info.kind = OpKind::compute;
      return info;
    }
  }
  if (op.hasTag(at::Tag::nondeterministic_seeded) ||
      op.hasTag(at::Tag::nondeterministic_bitwise) || never_recompute_names().count(name) ||
      !returns_tensor)
    return info;  // opaque
  if (thread_order_names().count(name)) {  // Note [Thread-order results]
    const c10::optional<int> accumulate = schema.argumentIndexWithName("accumulate");
    if (accumulate && schema.arguments()[*accumulate].type()->kind() == c10::TypeKind::BoolType)
      info.thread_order_arg = static_cast<int16_t>(*accumulate);
  }
  if (name == torch_compat::kHiddenWriteBatchNorm && info.num_args == 8) {
    info.kind = OpKind::compute;
    info.batch_norm = true;  // write_args depend on `training`: before_op
    return info;
  }
  if (info.write_args.empty()) {
    info.kind = OpKind::compute;
    if (name == torch_compat::kLeanBatchNormBackward)
      info.lean_kernel = &torch_compat::lean_batch_norm_backward;
    return info;
  }
  const bool one_tensor_written =
      info.write_args.size() == 1 &&
      schema.arguments()[info.write_args[0]].type()->kind() == c10::TypeKind::TensorType;
  if (one_tensor_written && returns_all_written) {
    info.kind = OpKind::compute;
    info.in_place = true;
    // Note [Overwrite] in lineage.cpp
    info.overwrites = name == "aten::zero_" || name == "aten::fill_" || name == "aten::copy_";
  }
  return info;
}

// An op's info, and for a seeded fill or factory the same op as opaque: what it is outside
// grad mode (Note [Seeded ops], Note [Seeded factories]).
struct Classified {
  OpInfo info, opaque_fill;
};

const Classified& op_info(const c10::OperatorHandle& op) {
  // Per thread, so no lock; the schema's address identifies the op for the process.
  thread_local std::unordered_map<const c10::FunctionSchema*, Classified> cache;
  const c10::FunctionSchema* key = &op.schema();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Classified c{classify_op(op), {}};
  if (c.info.generator_arg >= 0) {
    c.opaque_fill = c.info;
    c.opaque_fill.kind = OpKind::opaque;
    c.opaque_fill.in_place = c.opaque_fill.overwrites = false;
    c.opaque_fill.generator_arg = -1;
    c.opaque_fill.replay_op.reset();
    c.opaque_fill.packs_mask = false;
  }
  return cache.emplace(key, std::move(c)).first->second;
}

// --- Note [Raw access] ---------------------------------------------------------------------

std::atomic<bool> raw_access_guarded{false};
std::atomic<int> raw_access_attempts{0};

constexpr const char* kRawAccessGuard = R"PY(
def _dtr_guard_raw_access():
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor") or not hasattr(torch, "ops"):
        return
    try:
        pin = torch.ops.dtr.pin_raw
        hold = torch.ops.dtr.hold_raw
        begin = torch.ops.dtr.begin_raw_scope
        end = torch.ops.dtr.end_raw_scope
        adopt = torch.ops.dtr.adopt_storage
        done = torch.ops.dtr.raw_access_guarded
    except Exception:
        return
    T = torch.Tensor
    if not getattr(T, "_dtr_raw_access_guard", False):
        import functools
        def guard(name, refill, tensor_args=False):
            original = getattr(T, name, None)
            if original is None:
                return
            @functools.wraps(original)
            def method(self, *args, **kwargs):
                refill(self)
                for other in args if tensor_args else ():
                    if isinstance(other, T):
                        refill(other)
                return original(self, *args, **kwargs)
            setattr(T, name, method)
        for name in ("numpy", "__array__", "__dlpack__"):
            guard(name, pin)
        for name in ("tolist", "data_ptr", "storage", "untyped_storage", "_typed_storage"):
            guard(name, hold)
        # Note [Raw scopes]
        def scoped(owner, name, after=None, before=None):
            original = getattr(owner, name, None)
            if original is None:
                return
            @functools.wraps(original)
            def call(*args, **kwargs):
                begin()
                try:
                    if before is not None:
                        before(*args)
                    result = original(*args, **kwargs)
                finally:
                    end()
                if after is not None:
                    after(result)
                return result
            setattr(owner, name, call)
        def adopt_copy(result):
            # Note [Storages Python allocates]
            if isinstance(result, T):
                adopt(result)
        scoped(T, "tolist")
        scoped(T, "__deepcopy__", adopt_copy)
        # pickle: a tensor's storage is pickled after its __reduce_ex__ returns, by the
        # storage's own __reduce__ (torch.save to bytes), which holds it again.
        scoped(T, "__reduce_ex__")
        def hold_storage(storage):
            untyped = storage.untyped() if hasattr(storage, "untyped") else storage
            if untyped.device.type == "cpu":
                hold(torch.empty(0, dtype=torch.uint8).set_(untyped))
        for owner in (getattr(torch, "TypedStorage", None),
                      getattr(sys.modules.get("torch.storage"), "_StorageBase", None)):
            if owner is not None:
                scoped(owner, "__reduce__", before=hold_storage)
        serialization = sys.modules.get("torch.serialization")
        if serialization is not None:
            scoped(serialization, "_save")
            scoped(serialization, "_legacy_save")
        # Note [Raw access]: apply_, map_ and map2_ run a Python callable over the
        # elements in C++, reading (and writing) memory past the dispatcher: every tensor
        # they take is pinned (exposed: Note [Writes outside the dispatcher] in lineage.cpp).
        for name in ("apply_", "map_", "map2_"):
            guard(name, pin, tensor_args=True)
        # Note [Raw access]: to_dlpack is a function, bound by name wherever it was
        # imported (torch.to_dlpack, torch.utils.dlpack, a script's own
        # `from torch.utils.dlpack import to_dlpack`, run before this first op).
        raw = getattr(torch._C, "_to_dlpack", None)
        if raw is not None:
            @functools.wraps(raw)
            def to_dlpack(tensor):
                if isinstance(tensor, T):
                    pin(tensor)
                return raw(tensor)
            for module in list(sys.modules.values()):
                try:  # sys.modules may hold any object, lazy proxies among them
                    names = object.__getattribute__(module, "__dict__")
                except Exception:
                    continue
                if isinstance(names, dict):
                    for key in [k for k, v in names.items() if v is raw]:
                        names[key] = to_dlpack
        T._dtr_raw_access_guard = True
    # Note [Threads]: every thread the threading module starts records too.
    import threading
    if not getattr(threading, "_dtr_records_new_threads", False):
        record = torch.ops.dtr.record_on_this_thread
        previous = threading.getprofile() if hasattr(threading, "getprofile") else None
        def record_new_thread(frame, event, arg):
            sys.setprofile(previous)
            record()
            if previous is not None:
                return previous(frame, event, arg)
        threading.setprofile(record_new_thread)
        threading._dtr_records_new_threads = True
    done()
_dtr_guard_raw_access()
del _dtr_guard_raw_access
)PY";

void guard_raw_access() {
  if (raw_access_guarded.load(std::memory_order_relaxed)) return;
  // Until torch is importable (a few ops at most), then never again; a process without
  // Python stops trying at once.
  if (raw_access_attempts.fetch_add(1, std::memory_order_relaxed) > 10000) return;
  const PythonApi& python = python_api();
  if (!python.is_initialized || !python.gil_ensure || !python.gil_release || !python.run_string) {
    raw_access_attempts.store(1 << 30, std::memory_order_relaxed);
    return;
  }
  if (!python.is_initialized()) return;
  // One installer at a time. The Python code can give up the GIL part way (imports), and
  // a second thread's first op then ran it again: both defined and deleted the function
  // in __main__, and one raised NameError (seen with three threads starting ops at once).
  // A thread that finds it under way, or an op that the install itself runs, goes on
  // unguarded, as ops before torch is importable do; the installer finishes it.
  static std::atomic<bool> installing{false};
  if (installing.exchange(true, std::memory_order_acquire)) return;
  const int gil = python.gil_ensure();
  hook_python_exit();  // Note [Outputs at exit] in exit_writers.cpp: under the GIL
  python.run_string(kRawAccessGuard);
  python.gil_release(gil);
  installing.store(false, std::memory_order_release);
}

void pin_raw_kernel(const at::Tensor& self) {
  if (Lineage* lineage = the_lineage()) lineage->hold_for_raw_access(self, nullptr);
}

// Note [Raw scopes]
struct RawScope {
  int depth = 0;
  RawHold held;
};
thread_local RawScope raw_scope;

void hold_raw_kernel(const at::Tensor& self) {
  if (Lineage* lineage = the_lineage())
    lineage->hold_for_raw_access(self, raw_scope.depth > 0 ? &raw_scope.held : nullptr);
}

void begin_raw_scope_kernel() { ++raw_scope.depth; }

void end_raw_scope_kernel() {
  if (raw_scope.depth == 0 || --raw_scope.depth > 0) return;
  if (Lineage* lineage = the_lineage()) lineage->release_raw_access(raw_scope.held);
}

// Note [Composites that read past the dispatcher]: per op, the listed arguments' places and
// whether nothing may move while it runs.
struct RawReads {
  std::vector<size_t> places;  // held while it runs
  int written = -1;            // pinned for good
  bool no_moves = false;
  bool pin_results = false;
};
std::unordered_map<const c10::FunctionSchema*, RawReads>& raw_read_arguments() {
  static auto* reads = new std::unordered_map<const c10::FunctionSchema*, RawReads>;
  return *reads;  // filled once, at registration; read only after
}

void raw_read_composite(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                        torch::jit::Stack* stack) {
  // The composite's own kernel, where it would have run next; the ops it calls dispatch
  // from the top, as before. Not through Python's key: a TorchDispatchMode sees those
  // ops, as without the library, not the composite (Note [Dispatch modes]).
  const c10::DispatchKeySet below =
      (ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kDtrKey))
          .remove(c10::DispatchKey::Python);
  Lineage* lineage = the_lineage();
  const auto reads = raw_read_arguments().find(&op.schema());
  if (!lineage || reads == raw_read_arguments().end()) {
    op.redispatchBoxed(below, stack);
    return;
  }
  struct Hold {
    Lineage* lineage;
    bool no_moves;
    RawHold held;
    ~Hold() {
      lineage->release_raw_access(held);
      if (no_moves) lineage->end_raw_composite();
    }
  } hold{lineage, reads->second.no_moves, {}};
  if (hold.no_moves) lineage->begin_raw_composite();
  const size_t base = stack->size() - op.schema().arguments().size();
  for (size_t k : reads->second.places)
    if ((*stack)[base + k].isTensor())
      lineage->hold_for_raw_access((*stack)[base + k].toTensor(), &hold.held);
  // Written past the dispatcher: pinned for good, as apply_'s self (Note [Raw access]).
  if (reads->second.written >= 0 && (*stack)[base + reads->second.written].isTensor())
    lineage->hold_for_raw_access((*stack)[base + reads->second.written].toTensor(), nullptr);
  const size_t returns = op.schema().returns().size();
  op.redispatchBoxed(below, stack);
  if (reads->second.pin_results)
    for (size_t i = stack->size() - returns; i < stack->size(); ++i)
      if ((*stack)[i].isTensor()) lineage->hold_for_raw_access((*stack)[i].toTensor(), nullptr);
}

// Registers raw_read_composite for each op of torch_compat::kRawReadComposites that is
// composite here and has no kernel of its own where ours would go.
void register_raw_read_composites(c10::Dispatcher& dispatcher) {
  constexpr c10::DispatchKey kAutograd = c10::DispatchKey::AutogradCPU;
  auto* autograd = new torch::Library(torch::Library::IMPL, "aten", kAutograd, __FILE__, __LINE__);
  auto* below = new torch::Library(torch::Library::IMPL, "aten", kDtrKey, __FILE__, __LINE__);
  for (const torch_compat::RawReadComposite& c : torch_compat::kRawReadComposites) {
    const std::string full = c.op;                                   // aten::name.overload
    const std::string op_name = full.substr(std::strlen("aten::"));  // name.overload
    const size_t dot = full.find('.');
    const std::string name = full.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
    const c10::optional<c10::OperatorHandle> handle = dispatcher.findSchema({name, overload});
    if (!handle || !handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
      continue;
    bool own = false;
    for (c10::DispatchKey k : {kAutograd, c10::DispatchKey::Autograd, c10::DispatchKey::CPU,
                               c10::DispatchKey::CompositeExplicitAutograd, kDtrKey})
      own |= handle->hasKernelForDispatchKey(k);
    if (own) continue;
    RawReads reads;
    const std::vector<c10::Argument>& args = handle->schema().arguments();
    for (size_t i = 0; i < args.size(); ++i) {
      for (const char* wanted : c.reads)
        if (wanted && args[i].name() == wanted) reads.places.push_back(i);
      if (c.writes && args[i].name() == c.writes) reads.written = static_cast<int>(i);
    }
    reads.no_moves = c.no_moves;
    reads.pin_results = c.pin_results;
    raw_read_arguments().emplace(&handle->schema(), std::move(reads));
    autograd->impl(op_name.c_str(),
                   torch::CppFunction::makeFromBoxedFunction<&raw_read_composite>());
    below->impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&raw_read_composite>());
  }
}

// Note [Storages Python allocates]
void adopt_storage_kernel(const at::Tensor& self) {
  if (!self.defined() || self.device().type() != c10::DeviceType::CPU || !self.has_storage())
    return;
  if (Lineage* lineage = the_lineage())
    lineage->adopt_default_storage(self);
  else  // remat:False
    torch_compat::move_to_cpu_allocator(*self.storage().unsafeGetStorageImpl());
}

void raw_access_guarded_kernel() { raw_access_guarded.store(true, std::memory_order_relaxed); }

void record_on_this_thread_kernel() { enable_hook_on_this_thread(true); }

// --- Note [Reads of evicted storages] ------------------------------------------------------

std::atomic<uint64_t> largest_evicted{0};
std::atomic<bool> fault_reported{false};
std::atomic<bool> fault_report_written{false};
struct sigaction previous_segv, previous_bus;

void write_all(const char* text, size_t n) {
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

void on_fault(int sig, siginfo_t* info, void* context) {
  const uint64_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (address >= largest_evicted.load(std::memory_order_relaxed)) {
    // not ours: straight to the previous handler
  } else if (fault_reported.exchange(true)) {
    // An op's worker threads read the same storage and fault together. The first writes
    // the message; the others wait for it (up to a second), or their default action would
    // end the process in the middle of it.
    for (int i = 0; i < 1000 && !fault_report_written.load(); ++i) {
      const timespec ms{0, 1000000};
      nanosleep(&ms, nullptr);
    }
  } else {
    char hex[19] = "0x";
    for (int i = 0; i < 16; ++i) hex[2 + i] = "0123456789abcdef"[(address >> (60 - 4 * i)) & 15];
    static const char kHead[] = "dtr: fatal: memory at ";
    static const char kTail[] =
        " was read through a null data pointer, probably that of a tensor dtr evicted: an op "
        "ran without dtr's dispatcher fallback, on a thread that does not record (a thread of "
        "a C++ extension, or one started with _thread). Call torch.ops.dtr.record_on_this_thread() "
        "first on that thread, start it with the threading module, or run with "
        "DTR_CONF=remat:False (Note [Threads] in integration/torch/dispatch_hook.cpp).\n";
    write_all(kHead, sizeof(kHead) - 1);
    write_all(hex, 18);
    write_all(kTail, sizeof(kTail) - 1);
    fault_report_written.store(true);
  }
  const struct sigaction& previous = sig == SIGSEGV ? previous_segv : previous_bus;
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL &&
      previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // The default action: put it back; the faulting instruction runs again and kills us.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(sig, &fallback, nullptr);
}

void watch_faults() {
  struct sigaction action {};
  action.sa_sigaction = &on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous_segv);
  sigaction(SIGBUS, &action, &previous_bus);
}

// --- the fallback ----------------------------------------------------------------------------

// Note [Seeded like factories]: runs a `_like` factory as empty_like and its fill, each
// through the dispatcher (this one's fallback included); false, with the stack untouched,
// where the result would not be a strided CPU tensor.
bool draw_like(const c10::OperatorHandle& op, LikeFill fill, torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  const auto arg = [&](const char* name) -> const c10::IValue& {
    const c10::optional<int> at = schema.argumentIndexWithName(name);
    static const c10::IValue none;
    return at ? stack[stack.size() - n + static_cast<size_t>(*at)] : none;
  };
  const at::Tensor& self = arg("self").toTensor();
  const auto dtype = arg("dtype").toOptional<c10::ScalarType>();
  const auto layout = arg("layout").toOptional<c10::Layout>();
  const auto device = arg("device").toOptional<c10::Device>();
  const auto pin_memory = arg("pin_memory").toOptional<bool>();
  const auto memory_format = arg("memory_format").toOptional<c10::MemoryFormat>();
  if (!self.is_cpu() || self.layout() != c10::kStrided || (device && !device->is_cpu()) ||
      (layout && *layout != c10::kStrided))
    return false;
  at::Tensor out = at::empty_like(self, dtype, layout, device, pin_memory, memory_format);
  switch (fill) {
    case LikeFill::normal: out.normal_(0, 1); break;
    case LikeFill::uniform: out.uniform_(0, 1); break;
    case LikeFill::random: {
      const c10::IValue& low = arg("low");
      out.random_(low.isInt() ? low.toInt() : 0, arg("high").toInt());
      break;
    }
    case LikeFill::none: return false;
  }
  torch::jit::drop(stack, n);
  torch::jit::push(stack, std::move(out));
  return true;
}

// Note [Observed fake quantization], Note [Observed RReLU]: the call whose results are
// those of the observed op on top of `stack` once it has run (its tensors written in
// place), or no op where there is none. Its inputs must be material (locked).
struct ObservedCall {
  const c10::OperatorHandle* op = nullptr;
  torch::jit::Stack args;
};

// For _fused_moving_avg_obs_fq_helper.
ObservedCall fake_quant_call(const torch::jit::Stack& stack) {
  static const c10::optional<c10::OperatorHandle> per_tensor =
      c10::Dispatcher::singleton().findSchema({torch_compat::kFakeQuantPerTensor, ""});
  static const c10::optional<c10::OperatorHandle> per_channel =
      c10::Dispatcher::singleton().findSchema({torch_compat::kFakeQuantPerChannel, ""});
  // self, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
  // averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant, symmetric_quant
  const c10::IValue* a = &stack[stack.size() - 13];
  for (int i : {0, 2, 5, 6})
    if (!a[i].isTensor() || !a[i].toTensor().defined() || !a[i].toTensor().is_cpu() ||
        a[i].toTensor().layout() != c10::kStrided)
      return {};
  if (!a[11].isBool() || !a[11].toBool()) {
    if (!per_tensor) return {};
    return {&*per_tensor, {a[0], a[5], a[6], a[2], a[8], a[9]}};
  }
  if (!per_channel || a[2].toTensor().numel() != 1 || a[2].toTensor().item<int64_t>() == 0)
    return {};
  return {&*per_channel, {a[0], a[5], a[6], a[10], a[8], a[9]}};
}

// For rrelu_with_noise: self, noise, lower, upper, training, generator.
ObservedCall rrelu_call(const torch::jit::Stack& stack) {
  static const c10::optional<c10::OperatorHandle> mul =
      c10::Dispatcher::singleton().findSchema({torch_compat::kRReLUResult, "Tensor"});
  const c10::IValue* a = &stack[stack.size() - 6];
  if (!mul || !a[4].isBool() || !a[4].toBool() || !a[0].isTensor() || !a[1].isTensor()) return {};
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& noise = a[1].toTensor();
  if (!self.defined() || !noise.defined() || !self.is_cpu() || !noise.is_cpu() ||
      self.layout() != c10::kStrided || noise.layout() != c10::kStrided || !self.is_contiguous() ||
      !noise.is_contiguous() || self.sizes() != noise.sizes() ||
      self.scalar_type() != noise.scalar_type() || self.is_alias_of(noise))
    return {};
  const c10::ScalarType type = self.scalar_type();
  if (type != c10::kFloat && type != c10::kDouble) return {};  // bfloat16: Note [Observed RReLU]
  return {&*mul, {a[0], a[1]}};
}

ObservedCall observed_call(const OpInfo& info, const torch::jit::Stack& stack) {
  switch (info.observed) {
    case Observed::fake_quant: return fake_quant_call(stack);
    case Observed::rrelu: return rrelu_call(stack);
    case Observed::none: break;
  }
  return {};
}

// Records `call` as the op that made the observed op's results, on top of `results`,
// which it computed in `compute_ns`.
void record_observed(Lineage& lineage, ObservedCall& call, PendingOp& pending,
                     c10::DispatchKeySet keys, const torch::jit::Stack& results, size_t num_results,
                     uint64_t compute_ns);

// Note [Grown storages] in lineage.cpp: whether the resize_ on top of `stack` (self, size,
// memory_format) needs more bytes than its tensor's storage holds, as PyTorch's CPU
// kernel reckons it (contiguous strides in either memory format: its extent is its numel).
bool resize_grows_storage(const torch::jit::Stack& stack) {
  const c10::IValue& self = stack[stack.size() - 3];
  const c10::IValue& size = stack[stack.size() - 2];
  if (!self.isTensor() || !size.isIntList()) return true;  // as an opaque op, to be safe
  const at::Tensor& t = self.toTensor();
  if (!t.has_storage()) return true;
  int64_t numel = 1;
  for (int64_t d : size.toIntList()) numel *= d;
  if (numel <= 0) return false;
  const auto needed = static_cast<uint64_t>(t.storage_offset() + numel) * t.element_size();
  return needed > t.storage().nbytes();
}

void dtr_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                  torch::jit::Stack* stack) {
  const Classified& classified = op_info(op);
  // Note [Seeded like factories]: before the guard below, so that the pair comes back here.
  if (classified.info.like_fill != LikeFill::none && c10::GradMode::is_enabled() && recording() &&
      the_lineage() && draw_like(op, classified.info.like_fill, *stack))
    return;
  c10::impl::ExcludeDispatchKeyGuard no_reentry(kDtrKey);
  const c10::DispatchKeySet below =
      ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kDtrKey);
  Lineage* lineage = the_lineage();
  const OpInfo& info = classified.info.generator_arg >= 0 && !c10::GradMode::is_enabled()
                           ? classified.opaque_fill
                           : classified.info;
  if (!lineage) {
    // remat:False (install_storage_guard): the guard, for Note [Storages Python allocates],
    // and then this thread's ops bypass the fallback again.
    guard_raw_access();
    if (raw_access_guarded.load(std::memory_order_relaxed)) enable_hook_on_this_thread(false);
    op.redispatchBoxed(below, stack);
    return;
  }
  // Note [Dispatch modes]
  const bool python = below.has(c10::DispatchKey::Python);
  if ((info.kind == OpKind::view || (info.resize && !resize_grows_storage(*stack))) && !python) {
    op.redispatchBoxed(below, stack);
    return;
  }
  guard_raw_access();
  // Note [Hot-path allocations] in lineage.cpp: one PendingOp per thread, reused; a
  // second one only if an op ever ran inside an op's fallback on the same thread.
  thread_local PendingOp reused;
  thread_local bool reused_busy = false;
  std::unique_ptr<PendingOp> own;
  if (reused_busy) own = std::make_unique<PendingOp>();
  PendingOp& pending = own ? *own : reused;
  struct Busy {
    bool* flag;
    ~Busy() {
      if (flag) *flag = false;
    }
  } busy{reused_busy ? nullptr : &reused_busy};
  reused_busy = true;
  pending.reset(info, info.kind == OpKind::compute && recording() && !python);
  // Note [Op context] in lineage.cpp; a recorded op never had Python's key (Note [Dispatch
  // modes]).
  pending.keys = below;
  try {
    lineage->before_op(op, info, *stack, pending);
  } catch (...) {
    lineage->abort_op(pending);
    throw;
  }
  ObservedCall observed;  // Note [Observed fake quantization], Note [Observed RReLU]
  if (info.observed != Observed::none && !python && recording())
    observed = observed_call(info, *stack);
  const uint64_t room_before = room_ns_on_this_thread();  // Note [Host work in op times]
  // Note [Measuring workspaces] in cpu_allocator.cpp: only for the trace.
  WorkspaceMeter workspace(pending.record && lineage->tracing());
  const auto start = std::chrono::steady_clock::now();
  try {
    // Note [Lean batch-norm backward] in compat.cpp; never under Python's key, whose mode
    // must see the op itself (Note [Dispatch modes]).
    if (python || !info.lean_kernel || !info.lean_kernel(*stack))
      op.redispatchBoxed(below, stack);
  } catch (...) {
    lineage->abort_op(pending);
    throw;
  }
  pending.workspace_bytes = workspace.close();
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count() -
      static_cast<int64_t>(room_ns_on_this_thread() - room_before);
  const uint64_t op_ns = ns > 0 ? static_cast<uint64_t>(ns) : 1;
  // after_op unlocks the inputs itself if it throws: Note [Exceptions after an op] in lineage.cpp.
  lineage->after_op(op, pending, *stack, op_ns);
  if (observed.op)
    record_observed(*lineage, observed, pending, below, *stack, info.num_returns, op_ns);
}

void record_observed(Lineage& lineage, ObservedCall& call, PendingOp& pending,
                     c10::DispatchKeySet keys, const torch::jit::Stack& results, size_t num_results,
                     uint64_t compute_ns) {
  const OpInfo& info = op_info(*call.op).info;
  if (info.kind != OpKind::compute || info.num_returns != num_results ||
      info.num_args != call.args.size() || results.size() < num_results)
    return;
  pending.reset(info, /*record_op=*/true);
  pending.keys = keys;
  try {
    lineage.before_op(*call.op, info, call.args, pending);
  } catch (...) {
    lineage.abort_op(pending);
    throw;
  }
  torch::jit::drop(call.args, info.num_args);
  for (size_t i = results.size() - num_results; i < results.size(); ++i)
    call.args.push_back(results[i]);
  lineage.after_op(*call.op, pending, call.args, compute_ns);
}

// Note [Fork]: no other thread may be inside the engine when a DataLoader worker is
// forked (its copy of the engine would stay half-updated), so fork waits for the lock. The
// child cannot unlock it (a recursive mutex belongs to a thread id the child does not
// have), so it starts with a new one; its copy of the lineage then works on its own, and
// its remats never raise the thread count (Note [Op context] in lineage.cpp).
//
// The forking thread also brings its copy of RecordFunction's callbacks up to date first.
// Since the global callback below (Note [Step marks]) was added, each thread copies the
// global list under RecordFunction's own mutex at its first op, and no fork handler takes
// that mutex. A thread that forked before it ran an op left a child that had to take the
// mutex at its first op, while another thread's first copy could hold it across the fork:
// 16 of 200 children hung in a loop forking beside threads that each ran one op; none
// without dtr, and none once the forking thread had run an op. With the copy current the
// child never asks for the mutex, unless it adds callbacks of its own (a profiler).
void lock_before_fork() {
  at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION);
  if (Lineage* lineage = the_lineage()) lineage->mutex().lock();
}
void unlock_in_parent() {
  if (Lineage* lineage = the_lineage()) lineage->mutex().unlock();
}
void renew_in_child() {
  if (Lineage* lineage = the_lineage()) {
    new (&lineage->mutex()) std::recursive_mutex();
    lineage->note_forked_child();
  }
}

// The fallback on kDtrKey and the dtr:: ops; false if another library has the key.
bool register_fallback() {
  static std::once_flag once;
  static bool registered = false;
  std::call_once(once, [] {
    c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
    // Note [Dispatch key]
    if (dispatcher.hasBackendFallbackForDispatchKey(kDtrKey)) {
      std::fprintf(stderr, "dtr: another library already handles dispatch key %s; eviction "
                   "stays off in this process (the allocator and its budget stay on)\n",
                   c10::toString(kDtrKey));
      return;
    }
    // Never destroyed: PyTorch keeps calling into them until the process ends.
    auto* impl = new torch::Library(torch::Library::IMPL, "_", kDtrKey, __FILE__, __LINE__);
    impl->fallback(torch::CppFunction::makeFromBoxedFunction<&dtr_fallback>());
    register_raw_read_composites(dispatcher);  // Note [Composites that read past the dispatcher]
    if (!dispatcher.findSchema({"dtr::pin_raw", ""}).has_value()) {
      auto* def = new torch::Library(torch::Library::DEF, "dtr", c10::nullopt, __FILE__,
                                     __LINE__);
      def->def("pin_raw(Tensor self) -> ()", &pin_raw_kernel);
      def->def("hold_raw(Tensor self) -> ()", &hold_raw_kernel);
      def->def("begin_raw_scope() -> ()", &begin_raw_scope_kernel);
      def->def("end_raw_scope() -> ()", &end_raw_scope_kernel);
      def->def("adopt_storage(Tensor self) -> ()", &adopt_storage_kernel);
      def->def("raw_access_guarded() -> ()", &raw_access_guarded_kernel);
      def->def("record_on_this_thread() -> ()", &record_on_this_thread_kernel);
    }
    registered = true;
  });
  return registered;
}

}  // namespace

// Note [Step marks]
// ~~~~~~~~~~~~~~~~~
// Policy `auto` needs to know where a training step ends (Note [Policy trial] in
// eviction/heuristics/auto_heuristic.cpp). torch.optim wraps every optimizer's step() in
// `record_function("Optimizer.step#<class>.step")`, profiler or not. The profiler ops that
// record_function calls never reach the fallback (their kernels are composite, which the
// dispatcher prefers to a backend fallback), so the library listens to RecordFunction
// itself: a global callback on user scopes only, so the ops' own record functions (scope
// FUNCTION) stay as cheap as without it. When an optimizer step's scope ends, a period
// ends (Engine::end_period) if the step ends an iteration: two optimizers in one step (a
// GAN) make one period of it (Note [Iteration periods] in lineage.cpp). Only the outermost
// such scope on a thread counts. A step() not wrapped so (an optimizer that is not a
// torch.optim.Optimizer) makes none, and `auto` stays on its first candidate.
namespace {
thread_local int optimizer_step_depth = 0;

bool is_optimizer_step(const at::RecordFunction& fn) {
  static constexpr std::string_view kStep = "Optimizer.step#";
  const char* name = fn.name();
  return name != nullptr && std::string_view(name).compare(0, kStep.size(), kStep) == 0;
}

std::unique_ptr<at::ObserverContext> on_user_scope_start(const at::RecordFunction& fn) {
  if (is_optimizer_step(fn) && optimizer_step_depth++ == 0) begin_lineage_optimizer_step();
  return nullptr;
}

void on_user_scope_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (is_optimizer_step(fn) && optimizer_step_depth > 0 && --optimizer_step_depth == 0)
    end_lineage_optimizer_step();
}
}  // namespace

bool register_dispatch_hook() {
  static std::once_flag once;
  static bool registered = false;
  std::call_once(once, [] {
    if (!register_fallback()) return;
    pthread_atfork(&lock_before_fork, &unlock_in_parent, &renew_in_child);
    watch_faults();  // Note [Reads of evicted storages]
    at::addGlobalCallback(at::RecordFunctionCallback(&on_user_scope_start, &on_user_scope_end)
                              .scopes({at::RecordScope::USER_SCOPE}));  // Note [Step marks]
    registered = true;
  });
  return registered;
}

void install_storage_guard() {
  // Note [Storages Python allocates]: remat:False records nothing, but a deep copy must
  // come from the allocator as it does with lineage, or its peak (the baseline budgets are
  // fractions of) would leave it out. The fallback runs until the guard is in.
  if (register_fallback()) enable_hook_on_this_thread(true);
}

void note_evicted_bytes(uint64_t nbytes) {
  // Note [Reads of evicted storages]: grows only; the engine's lock serializes callers.
  if (nbytes > largest_evicted.load(std::memory_order_relaxed))
    largest_evicted.store(nbytes, std::memory_order_relaxed);
}

void enable_hook_on_this_thread(bool on) {
  c10::impl::tls_set_dispatch_key_included(kDtrKey, on);
}

void record_if_python_thread() {
  // Note [Threads]. Once per thread: a Python thread (one with a Python thread state,
  // whether it holds the GIL now or released it for the op) that allocates without the
  // key gets it, from its next op on. ATen's worker threads have no Python state.
  thread_local bool checked = false;
  if (checked) return;
  checked = true;
  if (c10::impl::tls_is_dispatch_key_included(kDtrKey)) return;
  const PythonApi& python = python_api();
  if (python.this_thread_state && python.this_thread_state()) enable_hook_on_this_thread(true);
}

}  // namespace dtr::torch_integration
