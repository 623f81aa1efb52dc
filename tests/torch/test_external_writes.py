"""Writes outside the dispatcher (Note [Writes outside the dispatcher] in
integration/torch/lineage.cpp). Memory the program can write without an op (a numpy view
of a tensor, the array a tensor was made from with torch.from_numpy) is fingerprinted
where ops read it. A remat that would read changed bytes is refused with a RuntimeError
that names the op, where before it computed other values than the run without the
library, silently; a read-only use, or a write before the op reads, stays bit-identical."""
import re

import pytest

from conftest import PYTHON, TRAINING_PRELUDE, clean_env, run, trains_as_without

# t: 1 MiB that an op reads; u = tanh(t @ t): 1 MiB, evicted under the budget once a 2 MiB
# filler comes (t is pinned: a constant; from_numpy memory is not ours and not counted).
# EXPOSE makes t's memory writable outside the dispatcher, WRITE writes it (or not) after u
# was computed, then u is read again.
SCRIPT = r"""
import numpy as np, torch
torch.manual_seed(0)
EXPOSE
u = torch.tanh(t @ t)
before = float(u.sum())
try:
    import dtr
except ImportError:
    dtr = None
if dtr is not None and dtr.is_enabled():
    dtr.set_budget(BUDGET)
    filler = torch.ones(2 ** 19)  # 2 MiB: with t and u, over the budget
    del filler
    print("EVICTED", dtr.memory_stats()["dtr.num_evictions"] > 0)
LATE
WRITE
try:
    after = float(u.sum())
    print("VALUE", after.hex(), "SAME" if after == before else "CHANGED")
except RuntimeError as e:
    print("REFUSED", str(e).replace("\n", " "))
    try:
        u.sum()
        print("SECOND READ WORKED")
    except RuntimeError as e2:
        print("REFUSED AGAIN", "written outside the dispatcher" in str(e2))
    print("OTHER", float((t * 0).sum()))  # the run goes on: an op that needs no remat
if dtr is not None and dtr.is_enabled():
    print("REMATS", dtr.memory_stats()["dtr.num_remats"])
"""

NUMPY_VIEW = """with torch.no_grad():
    t = torch.randn(512, 512)
a = t.numpy()
BUDGET = "3500K"
"""
# The numpy view taken after the op read t: that op's fingerprint is taken then.
LATE_VIEW = NUMPY_VIEW.replace("a = t.numpy()", "")
FROM_NUMPY = """a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
t = torch.from_numpy(a)
BUDGET = "2500K"
"""


def script(expose, write):
    late = "a = t.numpy()" if expose == LATE_VIEW else ""
    return SCRIPT.replace("EXPOSE", expose).replace("LATE", late).replace("WRITE", write)


EXPOSURES = {"numpy view": NUMPY_VIEW, "numpy view after the op": LATE_VIEW,
             "from_numpy": FROM_NUMPY}


def under_budget(lib, text):
    return run([PYTHON, "-c", text], clean_env(LD_PRELOAD=lib))


@pytest.mark.parametrize("expose", EXPOSURES.values(), ids=EXPOSURES.keys())
def test_a_write_through_numpy_after_an_op_read_it_refuses_the_remat(lib, expose):
    text = script(expose, "a[:] = 0.0")
    plain = run([PYTHON, "-c", text], clean_env())
    assert "VALUE" in plain.stdout and "SAME" in plain.stdout, plain.stdout + plain.stderr
    proc = under_budget(lib, text)
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    refused = next((l for l in proc.stdout.splitlines() if l.startswith("REFUSED ")), None)
    assert refused is not None, proc.stdout + proc.stderr  # before: VALUE ... CHANGED
    assert "cannot recompute an evicted result of aten::mm" in refused, refused
    assert "written outside the dispatcher" in refused and "clone()" in refused, refused
    assert "REFUSED AGAIN True" in proc.stdout, proc.stdout
    assert "OTHER 0.0" in proc.stdout, proc.stdout + proc.stderr


# Memory another process writes (share_memory_(), as Hogwild training does): a forked
# child zeroes t's shared memory, outside this process's dispatcher. On one thread: GNU
# OpenMP's pool does not survive a fork, and a parallel zero_ in the child hangs, with or
# without the library.
SHARED = """with torch.no_grad():
    t = torch.randn(512, 512)
t.share_memory_()
BUDGET = "2500K"
"""
CHILD_WRITES = """ctx = torch.multiprocessing.get_context("fork")
child = ctx.Process(target=lambda: (torch.set_num_threads(1), t.zero_()))
child.start()
child.join()
print("CHILD", child.exitcode)"""


def test_a_write_by_another_process_refuses_the_remat(lib):
    text = script(SHARED, CHILD_WRITES)
    plain = run([PYTHON, "-c", text], clean_env(), timeout=120)
    assert "CHILD 0" in plain.stdout and "SAME" in plain.stdout, plain.stdout + plain.stderr
    proc = run([PYTHON, "-c", text], clean_env(LD_PRELOAD=lib), timeout=120)
    assert "EVICTED True" in proc.stdout and "CHILD 0" in proc.stdout, proc.stdout + proc.stderr
    refused = next((l for l in proc.stdout.splitlines() if l.startswith("REFUSED ")), None)
    assert refused is not None, proc.stdout + proc.stderr
    assert "another process" in refused and "Hogwild" in refused, refused


@pytest.mark.parametrize("expose", EXPOSURES.values(), ids=EXPOSURES.keys())
@pytest.mark.parametrize("write", ["float(a.sum())", "a.copy()[:] = 0.0"], ids=["read", "copy"])
def test_reads_through_numpy_keep_remats_bit_identical(lib, expose, write):
    text = script(expose, write)
    plain = run([PYTHON, "-c", text], clean_env())
    value = re.search(r"^VALUE \S+", plain.stdout, re.M).group(0)
    proc = under_budget(lib, text)
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    assert value + " SAME" in proc.stdout, proc.stdout + proc.stderr
    assert int(re.search(r"^REMATS (\d+)", proc.stdout, re.M).group(1)) > 0, proc.stdout


def test_a_write_before_the_op_reads_is_seen(lib):
    """Only bytes an op read are fingerprinted: written through numpy first, then read by
    the op, the remat reads what the op read."""
    text = script(NUMPY_VIEW + "\na[:] = 0.5", "").replace(
        "u = torch.tanh(t @ t)", "a[:] = 0.25\nu = torch.tanh(t @ t)")
    plain = run([PYTHON, "-c", text], clean_env())
    value = re.search(r"^VALUE \S+", plain.stdout, re.M).group(0)
    proc = under_budget(lib, text)
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    assert value + " SAME" in proc.stdout, proc.stdout + proc.stderr


# An op that reads more exposed bytes than the fingerprint limit (64 MiB) is not recorded
# (its output is a constant), so a later write to the array cannot reach it: here the
# index op that gathers a batch from a 72 MiB from_numpy dataset, against one of 8 MiB.
LARGE = r"""
import numpy as np, torch
import dtr
rows = ROWS
data = np.zeros((rows, 1024), dtype=np.float32)
data[:, 0] = np.arange(rows)
X = torch.from_numpy(data)
idx = torch.arange(0, rows, rows // 512)
ops = dtr.memory_stats()["dtr.num_ops"]
xb = X[idx]
print("RECORDED", dtr.memory_stats()["dtr.num_ops"] - ops)
data[:] = 1.0
print("FIRST", float(xb[:, 0].sum()) == float(np.arange(rows)[::rows // 512].sum()))
"""


def test_an_op_over_a_large_exposed_input_is_not_recorded(lib):
    def recorded(rows):
        proc = under_budget(lib, LARGE.replace("ROWS", str(rows)))
        assert "FIRST True" in proc.stdout, proc.stdout + proc.stderr
        return int(re.search(r"^RECORDED (\d+)", proc.stdout, re.M).group(1))
    small, large = recorded(2048), recorded(18432)  # 8 MiB, 72 MiB
    assert small == large + 1, (small, large)


# Note [Overwrite] made a pinned storage that zero_ overwrites recomputable; an exported
# one must stay where numpy sees it. Before: t was evicted (its remat a memset), `a` read
# freed memory and t came back as zeros without the 2.0 written through `a`.
ZEROED = r"""
import torch, dtr
with torch.no_grad():
    t = torch.randn(512, 512)
a = t.numpy()
t.zero_()
a[:] = 2.0
v = torch.ones(512, 512) * 3.0  # 1 MiB that can go instead
dtr.set_budget("3500K")
filler = torch.ones(2 ** 19)  # 2 MiB: with t and v, over the budget
print("EVICTED", dtr.memory_stats()["dtr.num_evictions"] > 0)
del filler
print("SUMS", float(a.sum()), float(t.sum()), float(v.sum()))
"""


def test_an_exported_tensor_zeroed_in_place_stays_in_memory(lib):
    proc = under_budget(lib, ZEROED)
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    assert f"SUMS {2.0 * 512 * 512} {2.0 * 512 * 512} {3.0 * 512 * 512}" in proc.stdout, \
        proc.stdout + proc.stderr


# A model whose buffers are exposed: in shared memory (model.share_memory(), as Hogwild
# training does), trained at 0.7 of its peak in this process, or in a forked worker that
# trains the first two steps before this process trains the third; or viewed through numpy
# (as a logger of the running stats may keep them). The training-mode batch norm
# fingerprinted the exposed running stats where it read them; but they are no arguments of
# its record (Note [Batch norm] in dispatch_hook.cpp), and until 2026-12-02 each remat of
# its output failed with "Expected Tensor but got None", looking for them. On one thread:
# a fork (SHARED above).
EXPOSED_MODEL = TRAINING_PRELUDE + r"""
torch.set_num_threads(1)
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
EXPOSE
apply_budget()

def train(steps, put):  # put: where each loss's bits go
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        with torch.no_grad():  # data, as a loader's batch
            x, y = torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        put(struct.pack("<f", float(loss)).hex())

if WORKER:
    ctx = torch.multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    def work():
        train(2, queue.put)
        if dtr is not None and dtr.is_enabled():
            s = dtr.memory_stats()
            queue.put({"peak": s["allocated_bytes.all.peak"], "evictions": s["dtr.num_evictions"]})
    worker = ctx.Process(target=work)
    worker.start()
    worker.join()
    assert worker.exitcode == 0, worker.exitcode
    while not queue.empty():
        item = queue.get()
        if isinstance(item, dict):
            OUT["worker"] = dict(item, budget=int(float(sys.argv[1]) * int(sys.argv[2])))
        else:
            OUT["losses"].append(item)
train(3 - 2 * WORKER, OUT["losses"].append)
finish(model)
"""


EXPOSED_MODELS = {
    "shared memory": ("model.share_memory()", False),
    "shared memory, forked worker": ("model.share_memory()", True),
    "numpy views": ("views = [b.numpy() for b in model.buffers() if b.is_floating_point()]",
                    False),
}


@pytest.mark.parametrize("expose, worker", EXPOSED_MODELS.values(), ids=EXPOSED_MODELS.keys())
def test_a_model_with_exposed_buffers_trains_as_without_the_library(lib, expose, worker):
    code = EXPOSED_MODEL.replace("EXPOSE", expose).replace("WORKER", str(worker))
    for under in trains_as_without(code, lib, (0.7,)):
        assert len(under["losses"]) == 3, under
        if worker:  # the worker trained under the same budget
            child = under["worker"]
            assert child["evictions"] > 0 and child["peak"] <= child["budget"], under


# Note [Unrecomputable victims] in eviction/engine.cpp: h's memory is freed
# (`storage().resize_(0)`, as code that frees memory by hand does) or written through numpy
# after feat was computed from it, and before anything is evicted. feat can no longer be
# made again, so under pressure (six recomputable 4 MiB results over a 20 MB budget) it
# stays and the others go; before, the policy evicted feat and the read of it raised the
# refusal's RuntimeError.
CHANGED_BEFORE_EVICTION = r"""
import struct, torch
try:
    import dtr
except ImportError:
    dtr = None
if dtr is not None and dtr.is_enabled():
    dtr.set_budget(20_000_000)
torch.manual_seed(0)
with torch.no_grad():
    a = torch.randn(1024, 1024)
    h = a @ a
    feat = h * 2.0
    CHANGE
    junk = [a + i for i in range(6)]
    s = sum(j.sum().item() for j in junk)
    print("VALUES", struct.pack("<f", feat.sum().item()).hex(), struct.pack("<f", s).hex())
if dtr is not None and dtr.is_enabled():
    stats = dtr.memory_stats()
    print("EVICTIONS", stats["dtr.num_evictions"], "KEPT", stats["dtr.num_unrecomputable"])
"""


@pytest.mark.parametrize("change", ["h.storage().resize_(0)", "h.numpy()[:] = 0.0"],
                         ids=["freed", "written"])
def test_a_result_whose_input_changed_before_an_eviction_stays(lib, change):
    text = CHANGED_BEFORE_EVICTION.replace("CHANGE", change)
    plain = run([PYTHON, "-c", text], clean_env())
    proc = under_budget(lib, text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    values = [l for l in proc.stdout.splitlines() if l.startswith("VALUES")]
    assert values == [l for l in plain.stdout.splitlines() if l.startswith("VALUES")], proc.stdout
    counts = re.search(r"EVICTIONS (\d+) KEPT (\d+)", proc.stdout)
    assert counts and int(counts[1]) > 0 and int(counts[2]) > 0, proc.stdout


FROM_FILE = r"""
import sys, torch
try:
    import dtr
except ImportError:
    dtr = None
path = sys.argv[1]
n = 1024 * 1024
torch.manual_seed(0)
with open(path, "wb") as f:
    f.write(torch.randn(n).numpy().tobytes())
base = torch.from_file(path, shared=True, size=n).view(1024, 1024)
w = torch.randn(1024, 1024) * 0.03
ds = [torch.tanh(base @ w + i) for i in range(16)]
if dtr is not None and dtr.is_enabled():
    print("EVICTED", dtr.memory_stats()["dtr.num_evictions"] > 0, flush=True)
with open(path, "r+b") as f:  # another writer changes the mapped file
    f.write(bytes(4096))
try:
    print("SUM", sum(float(d.sum()) for d in ds))
except RuntimeError as e:
    print("REFUSED", str(e).splitlines()[0])
"""


def test_results_read_from_a_shared_file_are_not_remade_from_its_new_contents(lib, tmp_path):
    """Note [Results outside the allocator]: from_file(shared=True)'s result is memory another
    deleter frees, which a write to the file changes. Its readers were remade from the new
    contents (a probe, 2026-12-07: another sum, status 0); now they are fingerprinted, as an
    external constant's are, and the remat is refused."""
    plain = run([PYTHON, "-c", FROM_FILE, str(tmp_path / "plain.bin")], clean_env())
    assert "SUM " in plain.stdout, plain.stdout + plain.stderr
    proc = run([PYTHON, "-c", FROM_FILE, str(tmp_path / "dtr.bin")],
               clean_env(LD_PRELOAD=lib, DTR_BUDGET="40M"))
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    refused = next((l for l in proc.stdout.splitlines() if l.startswith("REFUSED ")), None)
    assert refused is not None, (plain.stdout, proc.stdout + proc.stderr)
    assert "cannot recompute" in refused and "from_file" in refused, refused
