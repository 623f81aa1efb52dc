"""A budget below what must stay in memory raises PyTorch's out-of-memory error, whose
message gives the budget, the pinned and the evictable bytes and what to try; only when
nothing more can be evicted."""
import re

from conftest import PYTHON, clean_env, run

SCRIPT = r"""
import torch, dtr
torch.manual_seed(0)
with torch.no_grad():                # outside autograd a draw is opaque (Note [Seeded factories])
    x = torch.randn(1024, 1024)      # 4 MiB, seeded random: pinned, never recomputed
y = x * 2                            # 4 MiB, recomputable
z = y * 2                            # 12 MiB live: fits the 13 MiB budget
u = z * 2                            # 4 more: y (live, recomputable) is evicted, no error
print("EVICTIONS", dtr.memory_stats()["dtr.num_evictions"])
print("Y", float(y[0, 0]) == float(x[0, 0]) * 2)   # y comes back
del y, z, u
with torch.no_grad():
    big = torch.randn(1024, 1024)    # a second and a third pinned 4 MiB
    big2 = torch.randn(1024, 1024)
try:
    with torch.no_grad():
        w = torch.randn(1024, 1024)  # a fourth: only pinned bytes are left
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
    assert "min_evictable" not in oom  # its pinned bytes are large: no advice on the bound
    assert "AFTER True" in out


# Note [Out-of-memory breakdown] (allocator/caching_allocator.cpp): an evaluation pass at
# batch 64 under torch.no_grad(). Each 3x3 convolution of a 16 MiB input takes a 16 MiB
# workspace besides its 16 MiB output, memory the lineage does not know of; the message
# must account for it instead of leaving it out of pinned and evictable bytes.
EVAL_SCRIPT = r"""
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 16, 16, 3, padding=1) for i in range(4))
try:
    with torch.no_grad():
        x = torch.randn(64, 3, 64, 64)
        for conv in convs:
            x = F.relu(conv(x))
    print("NO OOM")
except torch.cuda.OutOfMemoryError as e:
    print("OOM", str(e).replace("\n", " "))
"""


def mib(message, label):
    """The size after `label` in an out-of-memory message, in MiB."""
    match = re.search(re.escape(label) + r" ([0-9.]+) (B|KiB|MiB)", message)
    assert match, (label, message)
    scale = {"B": 1 / (1 << 20), "KiB": 1 / 1024, "MiB": 1}[match.group(2)]
    return float(match.group(1)) * scale


def test_oom_message_accounts_for_memory_outside_the_lineage(lib):
    proc = run([PYTHON, "-c", EVAL_SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:40M"))
    oom = next((l for l in proc.stdout.splitlines() if l.startswith("OOM ")), None)
    assert oom is not None, proc.stdout + proc.stderr
    # The input of the running convolution, locked while it runs.
    assert mib(oom, "in use by the running op") == 16.0, oom
    assert mib(oom, "untracked") >= 8.0, oom
    assert "workspace" in oom
    # Every allocated byte is in one of the four parts (block rounding aside).
    parts = sum(mib(oom, label) for label in ("pinned", "in use by the running op",
                                              "evictable", "untracked"))
    assert abs(parts - mib(oom, "allocated")) < 0.1, oom
    # Without the library the pass fits in memory: the budget, not the script, is short.
    plain = run([PYTHON, "-c", EVAL_SCRIPT], clean_env())
    assert "NO OOM" in plain.stdout
