"""A budget below what must stay in memory raises PyTorch's out-of-memory error, whose
message gives the budget, the pinned and the evictable bytes and what to try; only when
nothing more can be evicted."""
from conftest import PYTHON, clean_env, run

SCRIPT = r"""
import torch, dtr
torch.manual_seed(0)
x = torch.randn(1024, 1024)          # 4 MiB, seeded random: pinned, never recomputed
y = x * 2                            # 4 MiB, recomputable
z = y * 2                            # 12 MiB live: fits the 13 MiB budget
u = z * 2                            # 4 more: y (live, recomputable) is evicted, no error
print("EVICTIONS", dtr.memory_stats()["dtr.num_evictions"])
print("Y", float(y[0, 0]) == float(x[0, 0]) * 2)   # y comes back
del y, z, u
big = torch.randn(1024, 1024)        # a second and a third pinned 4 MiB
big2 = torch.randn(1024, 1024)
try:
    w = torch.randn(1024, 1024)      # a fourth: only pinned bytes are left
except torch.cuda.OutOfMemoryError as e:
    print("OOM", str(e).replace("\n", " "))
print("AFTER", float(x.sum()) == float(x.sum()))
"""


def test_oom_only_when_nothing_is_evictable(lib):
    proc = run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:13M"))
    out = proc.stdout
    assert "EVICTIONS " in out and "EVICTIONS 0" not in out, out + proc.stderr
    oom = next(l for l in out.splitlines() if l.startswith("OOM "))
    assert "budget of 13.00 MiB" in oom
    assert "pinned" in oom and "evictable" in oom
    assert "Try:" in oom or "try" in oom.lower()
    assert "Y True" in out
    assert "evictable 0 B" in oom
    assert "AFTER True" in out
