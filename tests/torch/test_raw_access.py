"""Raw access to evicted tensors (ARCHITECTURE.md "Proven" 9): `.numpy()`, `np.asarray`,
`.tolist()`, `data_ptr()` and `storage()` read memory without the dispatcher. Under a
budget that evicts, each must see the tensor's true values (refilled and pinned first),
never an uninitialised buffer: the script prints digests that must equal a run without
the library."""
import hashlib  # noqa: F401  (used inside SCRIPT)

from conftest import PYTHON, clean_env, run

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
