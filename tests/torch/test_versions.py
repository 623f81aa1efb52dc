"""A storage written in place several times becomes a chain of versions of one storage
(Note [Mutation] in integration/torch/lineage.cpp): readers that made only the storage
itself (its earlier versions, the views an LSTM cell chunks its gates into) need no copy,
and rematerializing the storage replays the chain in order, bit for bit. Past
kMaxVersions writes the storage is copied once and its chain starts again."""
import json
import os
from pathlib import Path

from conftest import PYTHON, ROOT, clean_env, run, stats_of

# 1.13's LSTM cell: gates made by mm, add_ of the input projection, then sigmoid_, sigmoid_,
# tanh_ and sigmoid_ on unsafe_chunk views. `writes` in-place ops in all (5 as the cell).
CELL = r"""
import json, sys, torch, dtr
writes, room = int(sys.argv[1]), int(sys.argv[2]) << 20
torch.manual_seed(0)
# x, w and b are random, drawn outside autograd (pinned: Note [Seeded factories]); the gates 8 MiB.
with torch.no_grad():
    x, w, b = torch.randn(512, 256), torch.randn(256, 4096), torch.randn(4096)

def cell():
    gates = x @ w
    gates.add_(b)
    chunks = gates.unsafe_chunk(4, 1)
    acts = [torch.Tensor.sigmoid_, torch.Tensor.sigmoid_, torch.Tensor.tanh_,
            torch.Tensor.sigmoid_]
    for k in range(writes - 1):
        acts[k % 4](chunks[k % 4])
    return gates

with dtr.disable():  # not recorded: its numpy export pins nothing the budget counts
    ref = cell().numpy().copy()
before = dtr.memory_stats()["allocation.all.allocated"]
gates = cell()
out = {"allocations": dtr.memory_stats()["allocation.all.allocated"] - before}
if room:
    # room - 1 MiB at once: the gates (and a copy of them) must go, then come back.
    dtr.set_budget(dtr.memory_stats()["dtr.pinned_bytes.current"] + room)
    dtr.reset_peak_stats()
    filler = torch.ones((room - (1 << 20)) // 4)
    del filler
    out["same"] = gates.numpy().tobytes() == ref.tobytes()
    stats = dtr.memory_stats()
    out.update(evictions=stats["dtr.num_evictions"], remats=stats["dtr.num_remats"],
               peak=stats["allocated_bytes.all.peak"], budget=dtr.get_budget())
print(json.dumps(out))
"""


def cell_stats(lib, writes, room_mib=0, conf=None):
    return stats_of(CELL, lib, writes, room_mib, conf=conf)


def test_an_lstm_cell_writes_its_gates_without_copies(lib):
    # As many allocations as without lineage (remat:False): the mm's output only. Counting
    # every reader, the cell copied its 8 MiB gates twice.
    plain = cell_stats(lib, 5, conf="remat:False")
    stats = cell_stats(lib, 5)
    assert plain["allocations"] == 1, plain
    assert stats["allocations"] == plain["allocations"], (stats, plain)


def test_the_gates_come_back_by_replaying_their_chain(lib):
    stats = cell_stats(lib, 5, room_mib=9)
    assert stats["evictions"] >= 1 and stats["remats"] >= 1, stats
    assert stats["same"], stats
    assert stats["peak"] <= stats["budget"], stats


def test_a_chain_past_its_limit_is_copied_once_and_stays_right(lib):
    # 12 writes: one copy when the chain reaches its limit (8 versions), not one per write
    # and not a pin (a pinned storage would not be evicted).
    stats = cell_stats(lib, 12, room_mib=17)
    assert stats["allocations"] == 2, stats
    assert stats["evictions"] >= 1 and stats["remats"] >= 1, stats
    assert stats["same"], stats


# Note [Chains through copies]: a gradient accumulated step after step with no zero_grad.
# Each write past the version cap copies it (lineage reads it) and records the new value
# as the write's output, and the copies' chain went on without end: under 16 MiB the
# pinned memory behind it filled at about step 2000 (64 MiB at step 8187, the probe's
# repro). Now the chain is cut after kMaxChainWrites writes, and the gradient keeps the
# bits of the run without the library.
ACCUMULATED = r"""
import hashlib, json, torch, dtr
def train(steps):
    torch.manual_seed(0)
    w = torch.randn(64, 64, requires_grad=True)
    for _ in range(steps):
        (torch.randn(16, 64) @ w).relu().sum().backward()
    return hashlib.sha256(w.grad.numpy().tobytes()).hexdigest()
with dtr.disable():
    ref = train(4000)
dtr.reset_peak_stats()
got = train(4000)
stats = dtr.memory_stats()
print(json.dumps({"same": got == ref, "peak": stats["allocated_bytes.all.peak"],
                  "pinned": stats["dtr.pinned_bytes.current"], "budget": dtr.get_budget()}))
"""


def test_a_gradient_accumulated_without_end_keeps_its_memory_bounded(lib):
    stats = stats_of(ACCUMULATED, lib, conf="budget:16M")
    assert stats["same"], stats
    assert stats["peak"] <= stats["budget"], stats
    assert stats["pinned"] < 4 << 20, stats


# Note [Small dead constants in bulk]: the same gradient with an SGD step every 100 steps.
# Each step's input and ReLU mask gradient (4 KiB each, pinned as results under
# min_evictable) were kept for the gradient's chain of versions, and the run ran out of
# memory within 10 steps under a budget of the plain run's peak, and of twice that.
SALIENCY = r"""
import hashlib, json, torch, dtr
torch.manual_seed(0)
w = torch.randn(64, 64, requires_grad=True)
for step in range(400):
    (torch.randn(16, 64) @ w).relu().sum().backward()
    if step % 100 == 99:
        with torch.no_grad():
            w -= 0.01 * w.grad
stats = dtr.memory_stats()
bits = hashlib.sha256(w.detach().numpy().tobytes() + w.grad.numpy().tobytes()).hexdigest()
print(json.dumps({"bits": bits, "peak": stats["allocated_bytes.all.peak"],
                  "evictions": stats["dtr.num_evictions"], "budget": dtr.get_budget()}))
"""


def test_a_gradient_summed_over_many_steps_trains_under_the_plain_runs_peak(lib):
    plain = stats_of(SALIENCY, lib, conf="remat:False")
    for budget in (plain["peak"], 2 * plain["peak"]):
        stats = stats_of(SALIENCY, lib, conf=f"budget:{budget}")
        assert stats["bits"] == plain["bits"], (budget, stats, plain)
        assert stats["peak"] <= stats["budget"] == budget, stats


def test_its_trace_replays_at_its_own_baseline_peak(lib, tmp_path):
    trace = tmp_path / "saliency.trace"
    run([PYTHON, "-c", SALIENCY], clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    sim = Path(os.environ.get("DTR_SIM", ROOT / "build" / "bin" / "dtr-sim"))
    out = json.loads(run([str(sim), "run", "--trace", str(trace), "--budget", "1.0", "--json",
                          "--allocator", "none"], clean_env()).stdout)
    assert out["status"] == "ok", out
