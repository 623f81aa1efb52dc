"""A storage an op grows (Note [Grown storages] in integration/torch/lineage.cpp): resize_ to
more elements than its storage holds, an out= op whose result PyTorch resizes, and set_ to a
result's storage with more elements than it holds; also a grown result whose old value another
result was computed from. Each case runs without the library and under a budget that forces
evictions around the grown tensor; the bytes the program defined must be the same, and the
process must not stop. Before, a grown result that was evicted stopped the process on `a
rematerialized output has another size`, also when resize_ grew it while evicted."""
import pytest

from conftest import PYTHON, clean_env, last_json, run

# argv: the case. Under the library the budget leaves 4 MiB of room (8 where `r` holds a copy
# of a's old value), and a filler 8 MiB larger then forces out two 4 MiB results made before
# it (`e` and `f`, or `r`: the only evictable ones). Only defined bytes are hashed: a grown
# storage's tail is whatever memory held.
PROGRAM = r"""
import hashlib, json, sys, torch
try:
    import dtr
except ImportError:
    dtr = None
budgeted = dtr is not None and dtr.is_enabled()
case = sys.argv[1]
n = 1 << 20
torch.manual_seed(0)
with torch.no_grad():
    x = torch.randn(n)  # data: pinned

def h(t):
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()

def stat(key):
    return dtr.memory_stats()[key] if budgeted else 0

out = {}
if case == "grown_in_place":
    a = torch.tanh(x)
    a.resize_(2 * n)
    a[n:] = 0.5
elif case == "grown_by_out":
    a = torch.sin(x)
    torch.cat([x, x * 0.5], out=a)
elif case == "grown_by_out_after_resize_0":  # what PyTorch's warning says to do
    a = torch.sin(x)
    a.resize_(0)
    torch.cat([x, x * 0.5], out=a)
elif case == "grown_by_out_with_reader":  # r read a's old value: a is copied first
    a = torch.sin(x)
    r = a * 2
    torch.cat([x, x * 0.5], out=a)
elif case == "grown_by_set":  # a tensor set_ to a result's storage, with more elements
    a = torch.empty(0)
    a.set_(torch.tanh(x), 0, (2 * n,), (1,))
    a[n:] = 0.5
e = torch.exp(x)
f = torch.cos(x)
f.resize_(n // 2)  # fits: stays evictable
room = 8 if case == "grown_by_out_with_reader" else 4  # MiB; the copy r reads takes 4
if budgeted:
    dtr.set_budget(stat("allocated_bytes.all.current") + (room << 20))
filler = torch.ones((room + 8) << 18)  # room + 8 MiB: 8 MiB must go
out["evictions"] = stat("dtr.num_evictions")
del filler
if case == "grown_while_evicted":
    remats = stat("dtr.num_remats")
    e.resize_(2 * n)  # e was evicted: refilled first
    out["refilled"] = stat("dtr.num_remats") > remats
    a = e[:n]
    e = e[:n]
else:  # pressure again, with `a` grown (no room for it with e grown)
    more = [torch.sin(x + i) for i in range(3)]
out["a"] = h(a)
out["e"] = h(e)
out["f"] = h(f)
out["r"] = h(r) if case == "grown_by_out_with_reader" else None
out["remats"] = stat("dtr.num_remats")
out["peak"] = stat("allocated_bytes.all.peak")
out["budget"] = dtr.get_budget() if budgeted else 0
print(json.dumps(out))
"""

CASES = ["grown_in_place", "grown_by_out", "grown_by_out_after_resize_0",
         "grown_by_out_with_reader", "grown_by_set", "grown_while_evicted"]


@pytest.mark.parametrize("case", CASES)
def test_a_grown_storage_keeps_its_bytes_under_a_budget(lib, case):
    plain = last_json(run([PYTHON, "-c", PROGRAM, case], clean_env()))
    under = last_json(run([PYTHON, "-c", PROGRAM, case], clean_env(LD_PRELOAD=lib)))
    assert under["evictions"] >= 2 and under["remats"] >= 1, under
    assert under["peak"] <= under["budget"], under
    for key in ("a", "e", "f", "r"):
        assert under[key] == plain[key], (key, under)
    if case == "grown_while_evicted":
        assert under["refilled"], under
