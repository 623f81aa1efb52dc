"""A pinned storage that lineage read is written (a parameter at the optimizer step): the
live storages computed from it are refilled and pinned first (Note [Pinned writes] in
integration/torch/lineage.cpp), smallest first, since each one pinned holds its bytes
while the next is rematerialized. Refilled largest first, a big descendant held the room a
small one's chain needed (the LSTM LM at 0.5x with policy dtr_eq: its 15.6 MiB logits
pinned, then the gradients' chain through three more storages of that size ran out)."""
from conftest import stats_of

# big: 8 MiB made from p in one op. small: 32 KiB made from p through an 8 MiB
# intermediate that is dead. Both are evicted, then p is written in place. Room: 9.5 MiB
# besides p, so small's chain (8 MiB + 32 KiB) fits only while big is not yet refilled.
WRITE = r"""
import json, torch, dtr
MiB = 1 << 20
torch.manual_seed(0)
with torch.no_grad():                     # a draw outside autograd is opaque
    p = torch.randn(MiB // 4)             # 1 MiB, random: pinned (Note [Seeded factories])
big = p.expand(8, -1) * 2.0               # 8 MiB, made from p at once
small = (p.expand(8, -1) * 1.5)[0, :8192].clone()  # 32 KiB, through a dead 8 MiB one
with dtr.disable():  # copies made outside lineage: exporting big itself would pin it
    ref_big, ref_small = big.clone().numpy().copy(), small.clone().numpy().copy()
pinned = dtr.memory_stats()["dtr.pinned_bytes.current"]
dtr.set_budget(pinned + 9 * MiB + 512 * 1024)
dtr.reset_peak_stats()
filler = torch.ones((9 * MiB + 512 * 1024 - 16384) // 4)  # big and small must both go
evictions = dtr.memory_stats()["dtr.num_evictions"]
del filler
p.add_(1.0)  # Note [Pinned writes]: big and small are refilled and pinned first
s = dtr.memory_stats()
print(json.dumps({"evictions": evictions, "remats": s["dtr.num_remats"],
                  "same": big.numpy().tobytes() == ref_big.tobytes() and
                          small.numpy().tobytes() == ref_small.tobytes(),
                  "peak": s["allocated_bytes.all.peak"], "budget": dtr.get_budget()}))
"""


def test_descendants_are_refilled_smallest_first(lib):
    stats = stats_of(WRITE, lib)
    assert stats["evictions"] >= 2 and stats["remats"] >= 2, stats
    assert stats["same"], stats
    assert stats["peak"] <= stats["budget"], stats
