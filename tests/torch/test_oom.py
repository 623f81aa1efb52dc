"""An allocation beyond the budget raises PyTorch's out-of-memory error, catchable in
Python, whose message names the budget; the process goes on afterwards, also after an
error raised inside a remat or in backward, with nothing left locked."""
from conftest import PYTHON, TRAINING_PRELUDE, clean_env, last_json, run

SCRIPT = r"""
import sys, torch
small = torch.ones(1000)                      # fits
try:
    big = torch.empty(2 * 1024 * 1024)        # 8 MiB > 4 MiB budget
except torch.cuda.OutOfMemoryError as e:      # c10::OutOfMemoryError; a RuntimeError
    assert isinstance(e, RuntimeError)
    print("OOM", str(e).splitlines()[0])
else:
    sys.exit("no out-of-memory error")
after = torch.ones(1000) + small              # still works
print("AFTER", float(after.sum()))
import dtr
print("NUM_OOMS", dtr.memory_stats()["num_ooms"])
"""


def test_allocation_beyond_budget_raises_catchable_oom(lib):
    proc = run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:4M"))
    out = proc.stdout
    assert "OOM " in out, out
    oom_line = next(l for l in out.splitlines() if l.startswith("OOM "))
    assert "budget of 4.00 MiB" in oom_line
    assert "tried to allocate 8.00 MiB" in oom_line
    assert "AFTER 2000.0" in out
    assert "NUM_OOMS 1" in out


TRAIN = r"""
import runpy, sys, torch
sys.argv = ["mlp.py", "--steps", "3"]
try:
    runpy.run_path(sys.argv_path, run_name="__main__")
except RuntimeError as e:
    print("CAUGHT", type(e).__name__, str(e).splitlines()[0])
"""


def test_training_under_too_small_budget_raises_in_python(lib):
    from conftest import SCRIPTS
    script = TRAIN.replace("sys.argv_path", repr(str(SCRIPTS / "mlp.py")))
    proc = run([PYTHON, "-c", script], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:1M"))
    assert "CAUGHT OutOfMemoryError" in proc.stdout, proc.stdout + proc.stderr
    assert "budget of 1.00 MiB" in proc.stdout
    # Without the budget the same run trains.
    ok = run([PYTHON, "-c", script], clean_env(LD_PRELOAD=lib))
    assert "CAUGHT" not in ok.stdout and "loss 2 " in ok.stdout


# Note [Host exceptions] (eviction/engine.cpp): an out-of-memory error raised inside a remat.
# a and b are evicted; `a + b` refills a, whose remat makes a 16 MiB repeat first, then b,
# whose remat has no room left. Afterwards nothing may stay locked: a 34 MiB allocation
# needs every 16 MiB tensor evicted. Before, b's storage stayed "in use by the running op"
# for good, and the allocation ran out of memory.
REMAT_OOM = r"""
import torch, dtr
torch.manual_seed(0)
dtr.set_budget("40M")
w = torch.randn(1024, 1024)
a = torch.tanh(w.repeat(4, 1))
b = torch.sigmoid(w.repeat(4, 1))
c = torch.relu(w.repeat(4, 1))
try:
    d = a + b + c
except torch.cuda.OutOfMemoryError as e:
    print("OOM", str(e).splitlines()[0])
z = torch.ones(34 * 2 ** 20 // 4)
print("ALLOCATED", z.numel())
print("SUM", float(a.sum() + b.sum() + c.sum()))
"""


def test_an_out_of_memory_error_in_a_remat_leaves_nothing_locked(lib):
    proc = run([PYTHON, "-c", REMAT_OOM], clean_env(LD_PRELOAD=lib), check=False)
    assert "OOM dtr: allocator out of memory" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ALLOCATED" in proc.stdout, proc.stdout + proc.stderr
    plain = run([PYTHON, "-c", REMAT_OOM.replace('dtr.set_budget("40M")', "")], clean_env())
    expected = next(l for l in plain.stdout.splitlines() if l.startswith("SUM "))
    assert expected in proc.stdout, (expected, proc.stdout)


# Remaking a 4 MiB tanh of a slice remakes the 16 MiB tensor it was cut from, which does
# not fit: the request fails inside the remat of that parent, on the way to the tanh,
# while the program's op (a sum) asked for nothing. Then a 16 MiB product evicted and
# summed fails in its own remat, with no chain behind it.
REMAT_CONTEXT = r"""
import torch, dtr
MiB = 1 << 20
dtr.set_budget(40 * MiB)
with torch.no_grad():
    a = torch.randn(1024, 4096)                # 16 MiB, data
b = a * 2                                      # 16 MiB, recorded
y = b[:, :1024].tanh()                         # 4 MiB, recorded
del b                                          # only lineage holds b: freed at once
with torch.no_grad():
    filler = torch.randn(22 * 256, 1024)       # 22 MiB: y is evicted to make room
assert dtr.memory_stats()["dtr.num_evictions"] == 1

def out_of_memory(tag, f):
    try:
        f()
    except torch.cuda.OutOfMemoryError as e:
        print(tag, e)

out_of_memory("OOM", lambda: y.sum())
out_of_memory("OWN", lambda: (a + 1).sum())    # a request of the program's own op
del filler
c = a * 4                                      # 16 MiB, recorded
with torch.no_grad():
    filler = torch.randn(20 * 256, 1024)       # 20 MiB: c is evicted to make room
assert dtr.memory_stats()["dtr.num_evictions"] == 2
out_of_memory("SELF", lambda: c.sum())
"""


def test_an_out_of_memory_error_in_a_remat_names_the_remat_and_the_program_op(lib):
    """Note [Out-of-memory within a remat]: the message says which op ran again, for how
    many bytes of results, which tensor's remat it was on the way to, and which op of the
    program it ran for; an op's own request says nothing of remats."""
    out = run([PYTHON, "-c", REMAT_CONTEXT], clean_env(LD_PRELOAD=lib)).stdout
    oom = next(l for l in out.splitlines() if l.startswith("OOM "))
    assert "tried to allocate 16.00 MiB" in oom, oom
    assert ("It came from remaking an evicted tensor: aten::mul ran again for 16.00 MiB of "
            "results, on the way to remaking aten::tanh's 4.00 MiB (2 ops deep), while the "
            "program ran aten::sum.") in oom, oom
    assert oom.index("It came from") < oom.index("Try:"), oom
    own = next(l for l in out.splitlines() if l.startswith("OWN "))
    assert "tried to allocate 16.00 MiB" in own and "remaking" not in own, own
    self_ = next(l for l in out.splitlines() if l.startswith("SELF "))
    assert ("It came from remaking an evicted tensor: aten::mul ran again for 16.00 MiB of "
            "results, while the program ran aten::sum.") in self_, self_


# A batch-size finder, as PyTorch Lightning's and Accelerate's: train a few steps at a
# batch, and on out-of-memory restore the model and try half. It tells an out-of-memory
# error as they do (Note [Out-of-memory words] in integration/torch/compat.cpp): a
# RuntimeError with one argument holding the words of PyTorch's CPU allocator. Under a
# budget the errors come from inside ops: forward, backward, and remats. argv[1]: the first
# batch; the budget comes from DTR_CONF (conftest's TRAINING_PRELUDE records the result).
FINDER = TRAINING_PRELUDE + r"""
import copy
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Dropout(0.1), nn.Linear(1024, 1024),
                      nn.ReLU(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 10))
init = copy.deepcopy(model.state_dict())

def train(bs):
    torch.manual_seed(1)
    model.load_state_dict(init)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    OUT["losses"].clear()  # the successful attempt's only
    for step in range(3):
        with torch.no_grad():
            x, y = torch.randn(bs, 512), torch.randint(0, 10, (bs,))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        record(loss)

def should_reduce_batch_size(e):
    return (isinstance(e, RuntimeError) and len(e.args) == 1
            and "DefaultCPUAllocator: can't allocate memory" in e.args[0])

bs, tried = int(sys.argv[1]), []
while True:
    try:
        train(bs)
        break
    except Exception as e:
        if not should_reduce_batch_size(e):
            raise
        tried.append(bs)
        for p in model.parameters():
            p.grad = None
        bs //= 2
OUT.update(bs=bs, tried=tried)
finish(model)
"""


def test_a_batch_size_finder_recovers_from_out_of_memory_errors(lib):
    """Started at 65536 under a 150 MiB budget, the finder runs out of memory in the
    forward pass, then in backward, and stops at the batch a fresh process stops at when it
    starts just above it; that run trains as the run without the library at its batch.
    Before Note [Host exceptions], the storages of a backward that ran out of memory stayed
    locked, and the retry's load_state_dict ran out of memory."""
    env = clean_env(LD_PRELOAD=lib, DTR_CONF="budget:150M")
    found = last_json(run([PYTHON, "-c", FINDER, "65536"], env))
    assert len(found["tried"]) >= 3 and found["remats"] > 0, found
    fresh = last_json(run([PYTHON, "-c", FINDER, str(2 * found["bs"])], env))
    assert fresh["tried"] == [2 * found["bs"]] and fresh["bs"] == found["bs"], (found, fresh)
    plain = last_json(run([PYTHON, "-c", FINDER, str(found["bs"])], clean_env()))
    assert (found["losses"], found["params"]) == (plain["losses"], plain["params"])
