"""Gradient accumulation under a budget: each micro-batch adds to the gradients in place,
so their versions reach back to every earlier micro-batch's input, a constant to lineage
that has died. A full collect pins the gradients (material then) and discards the dead
inputs (Note [Dead constants] in integration/torch/lineage.cpp). Before, the pinned bytes
grew by one input per micro-batch until the budget ran out."""
from conftest import stats_of

# 8 micro-batches of a 512 KiB input each, 3 MiB of room besides what the first left alive.
# (Until memory_stats found the dead storages before it counted, 2026-12-02, its count held
# 1 MiB the first micro-batch left dead, and this added 2 MiB: the same budget, 5.03 MiB.)
ACCUMULATE = r"""
import hashlib, json, sys, torch, dtr, torch.nn as nn, torch.nn.functional as F
MiB = 1 << 20
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                      nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))

def micro_batch():
    with torch.no_grad():  # a constant to lineage, as a loader's batch is (a draw in grad
        x = torch.randn(512, 256)  # mode is recorded: Note [Seeded factories]); dead on return
    F.cross_entropy(model(x), torch.randint(0, 10, (512,))).backward()

micro_batch()
if sys.argv[1] == "budget":
    dtr.set_budget(dtr.memory_stats()["allocated_bytes.all.current"] + 3 * MiB)
pinned = []
for _ in range(8):
    micro_batch()
    pinned.append(dtr.memory_stats()["dtr.pinned_bytes.current"])
s = dtr.memory_stats()
grads = hashlib.sha256(b"".join(p.grad.numpy().tobytes() for p in model.parameters()))
print(json.dumps({"param_bytes": sum(p.numel() * 4 for p in model.parameters()),
                  "pinned": pinned, "evictions": s["dtr.num_evictions"],
                  "peak": s["allocated_bytes.all.peak"], "budget": dtr.get_budget(),
                  "grads": grads.hexdigest()}))
"""


def test_dead_inputs_of_accumulated_gradients_are_freed(lib):
    plain = stats_of(ACCUMULATE, lib, "none")
    stats = stats_of(ACCUMULATE, lib, "budget")
    assert stats["evictions"] >= 1, stats
    assert stats["peak"] <= stats["budget"], stats
    assert stats["grads"] == plain["grads"], (stats, plain)
    # Parameters, gradients and at most two inputs (the one just dead is found by the
    # next collect); without the cut, one more 512 KiB input per micro-batch.
    assert max(stats["pinned"]) <= 2 * stats["param_bytes"] + 2 * 512 * 1024, stats
    assert stats["pinned"][-1] <= stats["pinned"][1], stats
