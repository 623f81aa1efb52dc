"""An op that overwrites a whole evicted storage does not bring its old value back
(Note [Overwrite] in integration/torch/lineage.cpp), also when the storage's current value
was made in place from an earlier one, as clip_grad_norm_ scales a gradient before
zero_grad zeroes it; while a storage that other lineage reads is still copied first, so
what was computed from its old value stays right."""
from conftest import stats_of

# y's storage is 8 MiB: made by exp, then scaled in place (a new version of the same
# storage); z forces it out, with 4 MiB of room left. zero_ must then neither refill it
# (no remat) nor need room for a refill.
SELF_VERSION = r"""
import json, torch, dtr
x = torch.randn(1 << 21)
y = x.exp()
y.mul_(0.5)
dtr.set_budget(dtr.memory_stats()["allocated_bytes.all.current"] + (4 << 20))
z = torch.ones(1 << 21)
before = dtr.memory_stats()
y.zero_()
after = dtr.memory_stats()
print(json.dumps({"evictions": before["dtr.num_evictions"],
                  "remats": after["dtr.num_remats"] - before["dtr.num_remats"],
                  "zero": bool((y == 0).all()), "z": float(z.sum()),
                  "peak": after["allocated_bytes.all.peak"], "budget": dtr.get_budget()}))
"""

# w is computed from y's old value. After zero_, w is forced out and read again: its remat
# must read the copy of y's old value, not the zeros.
OTHER_READER = r"""
import json, torch, dtr
torch.manual_seed(0)
with torch.no_grad():  # data, pinned: a draw in grad mode is recomputable, and under load
    x = torch.randn(1 << 20)  # the policy evicted x in place of w (Note [Seeded factories])
ref = x.exp().mul_(0.5).mul_(3.0).numpy().copy()  # numpy's memory: outside dtr
y = x.exp()
y.mul_(0.5)
w = y * 3.0
y.zero_()
zero = bool((y == 0).all())
dtr.set_budget(dtr.memory_stats()["allocated_bytes.all.current"] + (1 << 20))
# 8 MiB at once with 1 MiB of room: y's zeros and w (4 MiB each) must both go. (Six 1 MiB
# tensors let the policy evict an earlier one of them in place of w: a run under load
# did, and never read w back.)
filler = torch.ones(2 << 20)
evictions = dtr.memory_stats()["dtr.num_evictions"]
del filler  # room for w's remat
same = w.numpy().tobytes() == ref.tobytes()  # w comes back by remat
print(json.dumps({"evictions": evictions, "remats": dtr.memory_stats()["dtr.num_remats"],
                  "same": same, "zero": zero}))
"""


def test_overwriting_an_in_place_version_does_not_refill_it(lib):
    stats = stats_of(SELF_VERSION, lib)
    assert stats["evictions"] >= 1, stats  # y was evicted before zero_
    assert stats["remats"] == 0, stats
    assert stats["zero"] and stats["z"] == float(1 << 21), stats
    assert stats["peak"] <= stats["budget"], stats


def test_what_was_computed_from_the_old_value_stays_right(lib):
    stats = stats_of(OTHER_READER, lib)
    assert stats["evictions"] >= 2 and stats["remats"] >= 1, stats
    assert stats["same"] and stats["zero"], stats
