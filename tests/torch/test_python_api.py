"""python/dtr: memory_stats, set_budget, get_budget, reset_peak_stats, is_enabled, the
torch.cuda-named readers (memory_allocated, max_memory_allocated, memory_reserved,
max_memory_reserved), empty_cache and memory_summary."""
from conftest import PYTHON, clean_env, run

API = r"""
import torch, dtr
assert dtr.is_enabled()
s = dtr.memory_stats()
for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
            "reserved_bytes.all.peak", "allocation.all.allocated", "num_ooms"):
    assert key in s, key
assert dtr.get_budget() is None

keep = torch.empty(1024 * 1024)                       # 4 MiB live
big = torch.empty(4 * 1024 * 1024); del big           # peak >= 20 MiB
s = dtr.memory_stats()
assert s["allocated_bytes.all.peak"] >= 20 * 2**20 > s["allocated_bytes.all.current"]
dtr.reset_peak_stats()
s = dtr.memory_stats()
assert s["allocated_bytes.all.peak"] == s["allocated_bytes.all.current"] >= 4 * 2**20

s = dtr.memory_stats()
assert dtr.memory_allocated() == s["allocated_bytes.all.current"]
assert dtr.max_memory_allocated() == s["allocated_bytes.all.peak"]
assert dtr.memory_reserved() == s["reserved_bytes.all.current"]
assert dtr.max_memory_reserved() == s["reserved_bytes.all.peak"]

# empty_cache: a freed 32 MiB tensor leaves its exact segment cached until then.
huge = torch.ones(8 * 1024 * 1024)
before = dtr.memory_reserved()
del huge
assert dtr.memory_reserved() == before                 # cached, not given back
released = dtr.empty_cache()
assert released >= 32 * 2**20, released
assert dtr.memory_reserved() == before - released
assert dtr.memory_allocated() >= 4 * 2**20             # `keep` stays allocated
assert dtr.empty_cache() == 0                          # nothing left to give back

# Note [Trimming the small path]: freed small tensors leave reserved bytes at once, and
# empty_cache gives mimalloc's emptied pages back to the system.
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
small = [torch.ones(64 * 1024) for _ in range(1000)]  # 1000 x 256 KiB
reserved = dtr.memory_reserved()
del small
assert dtr.memory_reserved() <= reserved - 250 * 2**20
before = rss()
dtr.empty_cache()
assert before - rss() >= 100 * 2**20, (before, rss())

summary = dtr.memory_summary()
for text in ("Allocated memory", "Reserved memory", "Budget", "unlimited", "Reserved limit",
             "Pinned now", "Remats"):
    assert text in summary, summary

dtr.set_budget("6M")
assert dtr.get_budget() == 6 * 2**20
assert "6.00 MiB" in dtr.memory_summary()
try:
    torch.empty(1024 * 1024)                          # 4 + 4 MiB > 6 MiB
except torch.cuda.OutOfMemoryError as e:
    assert "budget of 6.00 MiB" in str(e), str(e)
else:
    raise SystemExit("set_budget did not take effect")

try:
    dtr.set_budget(1024)                              # below the 4 MiB live now
except dtr.DtrError as e:
    assert "allocated now" in str(e), str(e)
else:
    raise SystemExit("a budget below the live bytes was accepted")
assert dtr.get_budget() == 6 * 2**20

dtr.set_budget("0.5")                                 # a ratio of the peak so far
assert dtr.get_budget() == int(0.5 * dtr.max_memory_allocated()), dtr.get_budget()

dtr.set_budget(None)
assert dtr.get_budget() is None
more = torch.empty(4 * 1024 * 1024)                   # fits again
import numpy as np
dtr.set_budget(np.int64(64 * 2**20))                  # any integer type (was a TypeError)
assert dtr.get_budget() == 64 * 2**20
assert dtr.is_recording()
ops = dtr.memory_stats()["dtr.num_ops"]
with dtr.disable():
    assert not dtr.is_recording()
    y = torch.ones(100) * 2                            # runs, is not recorded
    assert dtr.memory_stats()["dtr.num_ops"] == ops
assert dtr.is_recording()
z = y * 2                                              # recorded again
assert dtr.memory_stats()["dtr.num_ops"] > ops
with dtr.disable():
    with dtr.disable():                                # nested: the outer block stays off
        pass
    assert not dtr.is_recording()
assert dtr.is_recording()
dtr.disable()
assert not dtr.is_recording()
with dtr.disable():
    pass
assert not dtr.is_recording()                          # as before the block
dtr.enable()
assert dtr.is_recording()

try:
    dtr.set_budget("10M\0garbage")                    # C would read "10M"
except ValueError as e:
    assert "NUL" in str(e), str(e)
else:
    raise SystemExit("a budget with a NUL was accepted")
print("API OK")
"""

NOT_LOADED = r"""
import torch, dtr
assert not dtr.is_enabled()
try:
    dtr.memory_stats()
except dtr.DtrError as e:
    assert "not loaded" in str(e)
else:
    raise SystemExit("memory_stats without the library")
dtr.load()
assert dtr.is_enabled()
assert dtr.max_memory_allocated() == 0                # what came before is not ours
try:
    dtr.set_budget("0.5x")                            # was a budget of 1 byte
except dtr.DtrError as e:
    assert "no peak to take 0.5x of" in str(e), str(e)
else:
    raise SystemExit("a ratio of no peak was accepted")
assert dtr.get_budget() is None
x = torch.ones(10)
assert dtr.memory_stats()["allocation.all.allocated"] >= 1
print("LOAD OK")
"""


def test_python_api_under_ld_preload(lib):
    proc = run([PYTHON, "-c", API], clean_env(LD_PRELOAD=lib))
    assert "API OK" in proc.stdout


def test_python_api_without_library_then_load(lib):
    proc = run([PYTHON, "-c", NOT_LOADED], clean_env())
    assert "LOAD OK" in proc.stdout


# Note [Freed pinned storages] (integration/torch/collector.cpp): the optimizer's momentum
# buffers are pinned at its step; `del opt` frees them with no op after it. The pinned count
# read next must leave them out (before, it stayed 4 MiB above the allocated bytes).
PINNED_AFTER_DEL = r"""
import torch, torch.nn as nn, torch.nn.functional as F, dtr
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(2):
    with torch.no_grad():
        x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
before = dtr.memory_stats()["allocated_bytes.all.current"]
del opt
s = dtr.memory_stats()
print("FREED", before - s["allocated_bytes.all.current"] >= 4 * 2 ** 20)
print("PINNED <= ALLOCATED", s["dtr.pinned_bytes.current"] <= s["allocated_bytes.all.current"])
"""


def test_memory_stats_leave_out_what_died_since_the_last_op(lib):
    proc = run([PYTHON, "-c", PINNED_AFTER_DEL], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:100M"))
    assert "FREED True" in proc.stdout and "PINNED <= ALLOCATED True" in proc.stdout, proc.stdout


# PyTorch 1.13's own formatter reads every key of its memory_stats() (active, inactive_split,
# oversize_*...); before 2026-12-07 it raised KeyError on dtr's dict (Note [Inactive splits]).
TORCH_SUMMARY = r"""
import torch, dtr, torch.cuda.memory as memory
x = torch.randn(1000, 1000); y = x * 2; del x
memory.memory_stats = lambda device=None: dtr.memory_stats()
summary = memory.memory_summary(0)
s = dtr.memory_stats()
assert s["active.all.current"] == s["allocation.all.current"] > 0, s
assert s["max_split_size"] == -1
print("SUMMARY OK" if "Non-releasable allocs" in summary and "Oversize" in summary else summary)
"""


def test_pytorch_formats_our_memory_stats(lib):
    proc = run([PYTHON, "-c", TORCH_SUMMARY], clean_env(LD_PRELOAD=lib))
    assert "SUMMARY OK" in proc.stdout, proc.stdout + proc.stderr
