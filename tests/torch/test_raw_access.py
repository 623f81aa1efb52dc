"""Raw access to evicted tensors (ARCHITECTURE.md "Proven" 9): `.numpy()`, `np.asarray`,
`.tolist()`, `data_ptr()` and `storage()` read memory without the dispatcher. Under a
budget that evicts, each must see the tensor's true values (refilled and pinned first),
never an uninitialised buffer: the script prints digests that must equal a run without
the library."""
import hashlib  # noqa: F401  (used inside SCRIPT)
import re

import pytest

from conftest import PYTHON, clean_env, last_json, run, stats_of

SCRIPT = r"""
import hashlib, sys
import numpy as np
import torch
torch.manual_seed(0)
w = torch.randn(256, 256)
x = torch.randn(256, 256)
# 48 recomputable tensors of 256 KiB each (12 MiB) under a 6 MiB budget: most are
# evicted by the time they are read below.
ys = [torch.tanh(x @ w + i) for i in range(48)]
evicted_before = None
try:
    import dtr
    if dtr.is_enabled():
        evicted_before = dtr.memory_stats()["dtr.num_evictions"]
        print("GUARDED", int(getattr(torch.Tensor, "_dtr_raw_access_guard", False)))
except ImportError:
    pass
def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
for i in range(len(ys)):
    y, ys[i] = ys[i], None
    kind = i % 4
    if kind == 0:
        print("numpy", i, digest(y.numpy()))
    elif kind == 1:
        print("asarray", i, digest(np.asarray(y)))
    elif kind == 2:
        print("tolist", i, digest(np.array(y.tolist(), dtype=np.float32)))
    else:
        assert y.data_ptr() != 0
        print("storage", i, digest(np.frombuffer(bytes(y.storage().untyped()), dtype=np.float32)))
    del y
if evicted_before is not None:
    print("EVICTED_BEFORE", evicted_before)
    print("NUM_OOMS", dtr.memory_stats()["num_ooms"])
"""


def lines(proc, prefix=("numpy", "asarray", "tolist", "storage")):
    return [l for l in proc.stdout.splitlines() if l.startswith(prefix)]


def test_raw_access_sees_true_values(lib):
    plain = run([PYTHON, "-c", SCRIPT], clean_env())
    assert len(lines(plain)) == 48
    under = run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:6M"))
    out = under.stdout
    assert "GUARDED 1" in out, out + under.stderr
    evicted = int(next(l for l in out.splitlines() if l.startswith("EVICTED_BEFORE")).split()[1])
    assert evicted > 0, "nothing was evicted: the test would prove nothing"
    assert "NUM_OOMS 0" in out
    assert lines(under) == lines(plain)


# Note [Raw scopes]: torch.save, copy.deepcopy, .tolist() and pickle.dumps read storages
# that stay alive; each read holds the storage only until the call returns. They used to
# pin it until it died: 48 live 256 KiB tensors (12 MiB) under a 6 MiB budget, saved,
# copied or pickled 4 at a time, filled the budget with pins and ran out of memory (save,
# deepcopy, pickle), or ended with 3.5 MiB pinned (tolist).
SCOPED = r"""
import copy, hashlib, io, pickle, sys
import torch
torch.manual_seed(0)
mode = sys.argv[1]
w = torch.randn(256, 256)
x = torch.randn(256, 256)
ys = [torch.tanh(x @ w + i) for i in range(48)]
h = hashlib.sha256()
for r in range(3):
    for i in range(0, 48, 4):
        if mode == "save":
            b = io.BytesIO()
            torch.save(ys[i:i + 4], b)
            b.seek(0)
            back = torch.load(b)
            h.update(b.getvalue())
            h.update(back[3].numpy().tobytes())
            del back
        elif mode == "deepcopy":
            c = copy.deepcopy(ys[i:i + 4])
            h.update((c[3] * 2).numpy().tobytes())
            del c
        elif mode == "pickle":  # its bytes hold storage addresses: compare what comes back
            back = pickle.loads(pickle.dumps(ys[i:i + 4]))
            h.update(b"".join(t.numpy().tobytes() for t in back))
            del back
        else:
            h.update(repr(ys[i + 3].tolist()).encode())
        ys[i + 1] = torch.tanh(ys[i + 1] * 1.0001)
total = ys[0]
for y in ys[1:]:
    total = total + y
h.update(total.numpy().tobytes())
print("DIGEST", h.hexdigest())
try:
    import dtr
    if dtr.is_enabled():
        s = dtr.memory_stats()
        print("STATS", s["dtr.num_evictions"], s["num_ooms"], s["dtr.pinned_bytes.current"])
except ImportError:
    pass
"""


@pytest.mark.parametrize("mode", ["save", "deepcopy", "tolist", "pickle"])
def test_scoped_raw_access_does_not_pin(lib, mode):
    plain = run([PYTHON, "-c", SCOPED, mode], clean_env())
    under = run([PYTHON, "-c", SCOPED, mode], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:6M"))
    digest = [l for l in plain.stdout.splitlines() if l.startswith("DIGEST")]
    assert len(digest) == 1
    assert [l for l in under.stdout.splitlines() if l.startswith("DIGEST")] == digest
    evictions, ooms, pinned = map(int, next(
        l for l in under.stdout.splitlines() if l.startswith("STATS")).split()[1:])
    assert evictions > 0, "nothing was evicted: the test would prove nothing"
    assert ooms == 0
    # What stays pinned: w and x (512 KiB), and `total`, read by numpy.
    assert pinned <= 1 << 20, f"{pinned} bytes pinned after the loop"


# Note [Raw scopes]: pickle reduces a tensor's storage after the tensor's __reduce_ex__ has
# returned, so the storage is no longer held then and may be evicted; its own __reduce__
# refills it before torch.save reads its bytes. Here the storage is taken by __reduce_ex__,
# evicted by 10 MiB of later tensors under a 6 MiB budget (policy lru: the stalest storage
# goes first whatever the measured op times), then pickled alone.
PICKLED_STORAGE = r"""
import hashlib, json, pickle, torch
torch.manual_seed(0)
w = torch.randn(256, 256)
x = torch.randn(256, 256)
t = torch.tanh(x @ w)
storage = t.__reduce_ex__(2)[1][0]
ys = [torch.tanh(x @ w + i) for i in range(40)]
try:
    import dtr
except ImportError:
    dtr = None
on = dtr is not None and dtr.is_enabled()
before = dtr.memory_stats()["dtr.num_remats"] if on else 0
data = pickle.dumps(storage)
remats = dtr.memory_stats()["dtr.num_remats"] - before if on else 0
back = torch.empty(0).set_(pickle.loads(data))
print(json.dumps({"digest": hashlib.sha256(back.numpy().tobytes()).hexdigest(),
                  "remats": remats, "sum": float(sum(y.sum() for y in ys))}))
"""


def test_a_storage_evicted_before_it_is_pickled_is_refilled(lib):
    plain = last_json(run([PYTHON, "-c", PICKLED_STORAGE], clean_env()))
    under = last_json(run([PYTHON, "-c", PICKLED_STORAGE],
                          clean_env(LD_PRELOAD=lib, DTR_CONF="budget:6M,policy:lru")))
    assert under["remats"] > 0, "the storage was not evicted: the test would prove nothing"
    assert (under["digest"], under["sum"]) == (plain["digest"], plain["sum"])


# Note [Dead pinned storages at a new peak]: with no budget, a storage pinned by .numpy()
# that died was freed only by the periodic full collect: this loop peaked at 21 MiB
# after 500 steps (and 59 MiB before that collect), holding 1 MiB.
DEAD_PINS = r"""
import json
import torch, dtr
torch.manual_seed(0)
w = torch.randn(256, 256)
x = torch.randn(256, 256)
for i in range(500):
    y = torch.tanh(x @ w + i)
    y.numpy()
    z = y * 2
    del y
s = dtr.memory_stats()
print(json.dumps({"peak": s["allocated_bytes.all.peak"], "pinned": s["dtr.pinned_bytes.current"]}))
"""


def test_dead_pinned_storages_are_freed_without_a_budget(lib):
    stats = stats_of(DEAD_PINS, lib)
    assert stats["peak"] < 4 << 20, stats
    assert stats["pinned"] <= 1 << 20, stats


# Note [Storages Python allocates]: copy.deepcopy of a plain tensor clones its storage
# through PyTorch's default CPU allocator, outside ours: 0 of its bytes reached the
# allocator's stats or the budget. Now the copy is moved into our allocator.
DEEPCOPY = r"""
import copy, json
import torch, dtr
x = torch.randn(1 << 18)
allocated = lambda: dtr.memory_stats()["allocated_bytes.all.current"]
before = allocated()
y = copy.deepcopy(x)
grown = allocated() - before
state = copy.deepcopy({"w": torch.randn(1 << 16), "b": torch.randn(1 << 16)[::2]})
print(json.dumps({"grown": grown, "equal": bool(torch.equal(x, y)),
                  "view_ok": state["b"].shape == (1 << 15,)}))
"""


@pytest.mark.parametrize("conf", ["budget:64M", "budget:64M,remat:False"])
def test_deepcopy_allocates_under_the_budget(lib, conf):
    # remat:False too: budgets are fractions of such a run's peak.
    stats = stats_of(DEEPCOPY, lib, conf=conf)
    assert stats == {"grown": 1 << 20, "equal": True, "view_ok": True}


# Note [Freed pinned storages], Note [Memory outside the allocator]: dead pinned storages
# that PyTorch had freed stayed in the engine's pinned bytes until a full collect (18 MiB
# more than the allocator held, at 60M), and the out-of-memory message gave more pinned
# bytes than allocated ones.
ACCOUNTING = r"""
import copy, json
import torch, dtr
torch.manual_seed(0)
w = torch.randn(256, 256)
x = torch.randn(256, 256)
ys = [torch.tanh(x @ w + i) for i in range(48)]
worst = 0
try:
    for r in range(3):
        for i in range(0, 48, 4):
            for t in ys[i:i + 4]:
                t.numpy()
            c = copy.deepcopy(ys[i:i + 4])
            d = (c[0] * 2).sum()
            ys[i + 1] = torch.tanh(ys[i + 1] * 1.0001)
            s = dtr.memory_stats()
            worst = max(worst, s["dtr.pinned_bytes.current"] - s["allocated_bytes.all.current"])
    print(json.dumps({"worst": worst, "oom": ""}))
except torch.cuda.OutOfMemoryError as e:
    print(json.dumps({"worst": worst, "oom": str(e)}))
"""


def mib(text, name):
    value, unit = re.search(name + r" ([0-9.]+) (B|KiB|MiB)", text).groups()
    return float(value) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[unit]


def test_pinned_bytes_are_allocated_bytes(lib):
    stats = stats_of(ACCOUNTING, lib, conf="budget:60M")
    assert stats == {"worst": 0, "oom": ""}
    stats = stats_of(ACCOUNTING, lib, conf="budget:12M")
    message = stats["oom"]
    assert "allocator out of memory" in message, stats
    parts = mib(message, "pinned") + mib(message, "in use by the running op") + \
        mib(message, "evictable")
    # Within the rounding of the message's two decimals.
    assert parts <= mib(message, "allocated") + 0.01 * (1 << 20), message


# Note [Memory outside the allocator]: a from_numpy input is pinned in the lineage, but its
# memory is not among the allocated bytes the message splits; it said pinned 16 MiB of 16.
OUTSIDE = r"""
import json
import numpy as np
import torch
x = torch.from_numpy(np.ones(1 << 22, dtype=np.float32))  # 16 MiB, numpy's memory
y = x * 2
try:
    z = y * 2
    print(json.dumps({"oom": ""}))
except torch.cuda.OutOfMemoryError as e:
    print(json.dumps({"oom": str(e)}))
"""


def test_memory_outside_the_allocator_is_not_pinned_bytes(lib):
    message = stats_of(OUTSIDE, lib, conf="budget:24M")["oom"]
    assert "allocator out of memory" in message
    assert mib(message, "allocated") == 16 << 20, message
    assert mib(message, "pinned") == 0, message
    assert mib(message, "in use by the running op") == 16 << 20, message


# DLPack (Note [Raw access]): to_dlpack is a function that a script may import by name
# before its first op, when the guard is not yet installed; numpy's from_dlpack goes
# through Tensor.__dlpack__. Before the guard covered it, to_dlpack of an evicted tensor
# handed out a null pointer and reading it killed the process (SIGSEGV).
DLPACK = r"""
import hashlib
import numpy as np, torch
from torch.utils.dlpack import to_dlpack, from_dlpack
import dtr
def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
torch.manual_seed(0)
with torch.no_grad():
    w = torch.randn(512, 512)
us = [torch.tanh(w @ w + i) for i in range(3)]
expected = [digest(u.clone().numpy()) for u in us]
dtr.set_budget("7M")
filler = torch.ones(5 * 2 ** 18)  # 5 MiB: two of the three 1 MiB results must go
print("EVICTIONS", dtr.memory_stats()["dtr.num_evictions"])
del filler
print("FUNCTION", digest(from_dlpack(to_dlpack(us[0])).numpy()) == expected[0])
print("MODULE", digest(from_dlpack(torch.utils.dlpack.to_dlpack(us[1])).numpy()) == expected[1])
print("NUMPY", digest(np.from_dlpack(us[2])) == expected[2])
"""


def test_dlpack_of_an_evicted_tensor_sees_its_values(lib):
    proc = run([PYTHON, "-c", DLPACK], clean_env(LD_PRELOAD=lib))
    assert re.search(r"^EVICTIONS [1-9]", proc.stdout, re.M), proc.stdout + proc.stderr
    for what in ("FUNCTION", "MODULE", "NUMPY"):
        assert f"{what} True" in proc.stdout, proc.stdout + proc.stderr


# Tensor.apply_, map_ and map2_ (Note [Raw access]) run a Python callable over the
# elements in C++, past the dispatcher. On evicted tensors they read a null pointer and
# killed the process. Now each sees the tensor's values, written or only read.
ELEMENTWISE = r"""
import hashlib
import numpy as np, torch
import dtr
def digest(t):
    return hashlib.sha256(t.clone().numpy().tobytes()).hexdigest()
torch.manual_seed(0)
with torch.no_grad():
    w = torch.randn(64, 64)
ts = [torch.tanh(w @ w + i).repeat(4, 4) for i in range(5)]  # 256 KiB each
dtr.set_budget("1700K")
filler = torch.ones(2 ** 18)  # 1 MiB: most of them go
print("EVICTIONS", dtr.memory_stats()["dtr.num_evictions"])
del filler
ts[0].apply_(lambda v: v * 2.0)
ts[1].map_(ts[2], lambda a, b: a - b)
ts[3].map2_(ts[4], ts[2], lambda a, b, c: a + b * c)
print("DIGESTS", *[digest(t)[:16] for t in ts])
"""


def test_elementwise_python_callables_see_evicted_values(lib):
    plain = run([PYTHON, "-c", ELEMENTWISE.replace("import dtr", "").replace(
        'dtr.set_budget("1700K")', "").replace(
        'print("EVICTIONS", dtr.memory_stats()["dtr.num_evictions"])', "")], clean_env())
    digests = re.search(r"^DIGESTS .*", plain.stdout, re.M).group(0)
    proc = run([PYTHON, "-c", ELEMENTWISE], clean_env(LD_PRELOAD=lib))
    assert re.search(r"^EVICTIONS [1-9]", proc.stdout, re.M), proc.stdout + proc.stderr
    assert digests in proc.stdout, proc.stdout + proc.stderr


# Note [Storages Python allocates]: the copy_ that fills a storage's clone in copy.deepcopy
# writes memory PyTorch's default allocator made, before the guard moves it into ours, and
# moving it in must evict here. A try at making fresh buffers filled by copy_ recomputable
# (Note [Overwrite]) made that clone evictable with bytes outside the budget, and this ran
# out of memory; such a storage is never made an op's output now.
DEEPCOPY_TIGHT = r"""
import copy, json, torch, dtr
with torch.no_grad():
    x = torch.randn(1 << 18)              # 1 MiB, pinned
y = torch.tanh(x)                         # 1 MiB, recomputable
z = torch.exp(x)                          # 1 MiB, recomputable
dtr.set_budget(dtr.memory_stats()["allocated_bytes.all.current"] + (512 << 10))
c = copy.deepcopy(y)
s = dtr.memory_stats()
print(json.dumps({"equal": bool(torch.equal(c, torch.tanh(x))),
                  "evictions": s["dtr.num_evictions"]}))
"""


def test_deepcopy_that_must_evict_to_move_its_copy_in(lib):
    stats = stats_of(DEEPCOPY_TIGHT, lib)
    assert stats["equal"] and stats["evictions"] >= 1, stats


# Note [Composites that read past the dispatcher]: the packed-sequence ops are composites
# that read batch_sizes (_pack_padded_sequence's second output) through its data pointer,
# where the fallback never sees them. 4096 steps make it 32 KiB, over the default
# min_evictable; the constants held after packing leave no room for anything
# recomputable, so before the fix it was evicted and _pack_padded_sequence_backward failed
# with "its data is not allocated yet" (14 and 15 held); under min_evictable:0 a packed GRU
# also read freed memory ("shape '[1, 5515247307648, 384]' is invalid", 5 runs of 8 beside
# a busy loop).
# Printed last by the programs below under the library.
EVICTIONS_AT_EXIT = r"""
try:
    import dtr
    if dtr.is_enabled():
        s = dtr.memory_stats()
        print("EVICTIONS", s["dtr.num_evictions"], "OOMS", s["num_ooms"])
except ImportError:
    pass
"""
PACKED = r"""
import hashlib, sys
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
torch.manual_seed(0)
T, B, F = 4096, 4, 64
with torch.no_grad():
    lengths = torch.tensor([T, T - 7, 1000, 5])
x = torch.randn(T, B, F, requires_grad=True)
h = torch.tanh(x)  # 4 MiB, recomputable
packed = pack_padded_sequence(h, lengths, enforce_sorted=False)
del h
with torch.no_grad():  # what cannot be evicted: every recomputable storage must go
    hold = [torch.randn(256, 1024) for _ in range(int(sys.argv[1]))]
out, _ = pad_packed_sequence(packed, total_length=T)
del hold
out.square().sum().backward()
print("out", hashlib.sha256(out.detach().numpy().tobytes()).hexdigest())
print("grad", hashlib.sha256(x.grad.numpy().tobytes()).hexdigest())
""" + EVICTIONS_AT_EXIT


def prints_as_without(lib, code, arg, budget, prefix):
    """Runs `code` (argv: `arg`) without the library and under `budget`: the run under it
    must evict, not run out of memory, and print the plain run's `prefix` lines."""
    plain = run([PYTHON, "-c", code, str(arg)], clean_env())
    under = run([PYTHON, "-c", code, str(arg)], clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{budget}"))
    assert re.search(r"^EVICTIONS [1-9]\d* OOMS 0$", under.stdout, re.M), under.stdout + under.stderr
    assert lines(under, prefix) == lines(plain, prefix) != []


@pytest.mark.parametrize("held", [14, 15])
def test_packed_sequence_sizes_are_never_evicted(lib, held):
    prints_as_without(lib, PACKED, held, "24M", ("out", "grad"))


# The other composites of the list (torch_compat::kRawReadComposites) get the library's
# kernel where they run, and still give the plain run's values and gradients under a
# budget that evicts everything it can (min_evictable:0): ctc_loss with tensor lengths
# (int64 and int32), max_pool1d with and without grad, tensor_split by a tensor of indices,
# nanmean into out=, linalg.eigvals without grad.
COMPOSITES = r"""
import hashlib
import torch, torch.nn.functional as F
torch.manual_seed(0)
def h(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]
registered = []
for name in ("aten::ctc_loss.Tensor", "aten::gru.data", "aten::_pad_packed_sequence",
             "aten::_pack_padded_sequence_backward", "aten::max_pool1d", "aten::nanmean.out",
             "aten::linalg_eigvals", "aten::_sobol_engine_draw"):
    dump = torch._C._dispatch_dump(name)
    registered.append(all(any(l.startswith(k) and "dispatch_hook.cpp" in l
                              for l in dump.splitlines()) for k in ("AutogradCPU:", "Fake:")))
x = torch.randn(8, 16, 50, requires_grad=True)
y = F.max_pool1d(torch.tanh(x), 3)
with torch.no_grad():
    z = F.max_pool1d(torch.tanh(x), 3)
lp = torch.randn(50, 8, 20).log_softmax(2).detach().requires_grad_()
targets = torch.randint(1, 20, (8, 30))
il = torch.full((8,), 50, dtype=torch.long) + 0
tl = torch.randint(10, 30, (8,)) + 0
ctc = F.ctc_loss(lp, targets, il, tl)
ctc32 = F.ctc_loss(lp, targets, il.int(), tl.int(), reduction="sum")
parts = torch.tensor_split(x, torch.tensor([3, 7]) + 0, dim=0)
nm = torch.empty(16, 50)
torch.nanmean(x.detach(), 0, out=nm)
(y.sum() + ctc + ctc32 + sum(p.square().sum() for p in parts)).backward()
eig = torch.linalg.eigvals(x.detach()[0, :, :16])
print("VALUES", h(y), h(z), h(ctc), h(ctc32), h(nm), h(x.grad), h(lp.grad), h(eig))
# A TorchDispatchMode sees the ops the composite calls, as without the library, not it.
from torch.utils._python_dispatch import TorchDispatchMode
class Names(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))
names = Names()
with names:
    F.ctc_loss(lp, targets, il, tl)
print("MODE", " ".join(names.names))
try:
    import dtr
    if dtr.is_enabled():
        print("REGISTERED", all(registered))
        print("EVICTIONS", dtr.memory_stats()["dtr.num_evictions"])
except ImportError:
    pass
"""


def test_composites_that_read_arguments_directly_see_their_values(lib):
    plain = run([PYTHON, "-c", COMPOSITES], clean_env())
    under = run([PYTHON, "-c", COMPOSITES],
                clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300K,min_evictable:0"))
    assert "REGISTERED True" in under.stdout, under.stdout + under.stderr
    assert re.search(r"^EVICTIONS [1-9]", under.stdout, re.M), under.stdout + under.stderr
    assert lines(under, ("VALUES",)) == lines(plain, ("VALUES",)) != []
    # With no budget, nothing is remade under the mode (a remat of the evicted randint
    # would show its replay there too): the mode sees the same ops.
    loaded = run([PYTHON, "-c", COMPOSITES], clean_env(LD_PRELOAD=lib))
    assert "REGISTERED True" in loaded.stdout, loaded.stdout + loaded.stderr
    assert lines(loaded, ("MODE",)) == lines(plain, ("MODE",)) != []


# Note [Composites that read past the dispatcher]: SobolEngine's state is written in place
# by composites (_sobol_engine_initialize_state_, _scramble_) past the dispatcher. Evicted
# (it was a torch.zeros result to lineage, 70 KiB here), the next draw failed with "its
# data is not allocated yet" (124 and 125 held); refilled by a remat of that zeros, it would
# have drawn from zeros. Now it is pinned where it is written: the recomputable y is
# evicted instead, and the draws are the plain run's.
SOBOL = r"""
import hashlib, sys
import torch
torch.manual_seed(0)
eng = torch.quasirandom.SobolEngine(dimension=300, scramble=True, seed=7)
a = eng.draw(64)
w = torch.randn(256, 256)
ys = [torch.tanh(w @ w + i) for i in range(8)]  # 256 KiB each, recomputable
keep = ys[0]
del ys
with torch.no_grad():
    hold = [torch.randn(16, 1024) for _ in range(int(sys.argv[1]))]  # 64 KiB each
del hold
b = eng.draw(64)
print("draws", hashlib.sha256(a.numpy().tobytes() + b.numpy().tobytes()).hexdigest())
""" + EVICTIONS_AT_EXIT


@pytest.mark.parametrize("held", [124, 125])
def test_sobol_state_written_past_the_dispatcher_is_kept(lib, held):
    prints_as_without(lib, SOBOL, held, "8M", ("draws",))
