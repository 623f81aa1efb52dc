"""DTR_TRACE: a live run records its ops in our trace format, and dtr-sim replays the
recorded step under a budget (docs/pytorch.md, Note [Recording a trace])."""
import json
import os
from pathlib import Path

from conftest import PYTHON, Result, clean_env, driver, run, trains_bit_identically, ROOT

ARGS = ("mlp.py", "--steps", "2", "--batch", "512", "--depth", "6", "--width", "256")


def dtr_sim():
    return Path(os.environ.get("DTR_SIM", ROOT / "build" / "bin" / "dtr-sim"))


def test_recorded_trace_replays_in_the_simulator(lib, tmp_path):
    trace = tmp_path / "mlp.trace"
    live = Result(run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}")))
    assert trace.exists(), live.proc.stderr
    assert "dtr: wrote trace" in live.proc.stderr
    first = trace.read_text().splitlines()[0]
    assert json.loads(first)["INSTRUCTION"] == "DTR_TRACE"
    ops = live.stats["dtr.num_ops"]
    # The simulator reads it back and replays it with no budget, and under half its peak.
    full = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "1.0",
                           "--json"], clean_env()).stdout)
    assert full["status"] == "ok"
    assert full["stats"]["dtr.num_ops"] >= ops
    half = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "0.5",
                           "--json", "--allocator", "none"], clean_env()).stdout)
    assert half["status"] in ("ok", "oom", "thrash")
    assert half["stats"]["dtr.num_ops"] >= 1


def test_trace_frees_what_the_live_run_frees(lib, tmp_path):
    """Format v2: storages the live collector discards (the gradients pinned at opt.step,
    overwritten by zero_grad) are DISCARDed in the trace, and releases come one op after
    a death, so the replay's baseline peak is not above the live allocator-only peak (the
    live one also holds memory the engine never sees) and a replay under the live peak
    in bytes finishes with next to no recompute."""
    trace = tmp_path / "mlp.trace"
    run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["VERSION"] == 4
    assert any(json.loads(l)["INSTRUCTION"] == "DISCARD" for l in lines[1:])
    live = Result(run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    peak = live.stats["allocated_bytes.all.peak"]
    sim = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", str(peak),
                          "--json", "--allocator", "none"], clean_env()).stdout)
    assert sim["baseline_peak_bytes"] <= peak, (sim["baseline_peak_bytes"], peak)
    # The replay frees a pinned storage at its DISCARD (the live full collect), later than
    # the baseline pass does, so a few evictions may happen; little recompute does.
    assert sim["status"] == "ok" and sim["overhead"] < 1.05, sim


def test_a_recorded_op_carries_the_scratch_it_held_while_it_ran(lib, tmp_path):
    """Note [Measuring workspaces] (cpu_allocator.cpp): a CPU convolution allocates
    scratch beside its output and frees it before it returns. The trace carries it as the
    CALL's WORKSPACE, so the replayed baseline peak meets the live one (the allocator's,
    without lineage). Without it the replay's peak was 0.75% under the live one here (80.25
    MB), with it 16 KB under."""
    args = ("cnn.py", "--steps", "2")
    trace = tmp_path / "cnn.trace"
    run(driver(*args), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    calls = [json.loads(l) for l in trace.read_text().splitlines()[1:]]
    calls = [c for c in calls if c["INSTRUCTION"] == "CALL"]
    scratch = {c["NAME"] for c in calls if c.get("WORKSPACE", 0) > 0}
    assert {"aten::convolution", "aten::convolution_backward"} <= scratch, scratch
    live = Result(run(driver(*args), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    peak = live.stats["allocated_bytes.all.peak"]
    sim = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--json",
                          "--allocator", "none"], clean_env()).stdout)
    assert sim["baseline_peak_bytes"] <= peak, (sim["baseline_peak_bytes"], peak)
    assert peak - sim["baseline_peak_bytes"] < peak // 1000, (sim["baseline_peak_bytes"], peak)


def test_dead_pinned_storages_are_discarded_when_lineage_lets_them_go(lib, tmp_path):
    """Note [Discards in a trace]: the LSTM script's step-1 logits (15.6 MiB) are pinned at
    the optimizer step (Note [Pinned writes]) and die early in step 2. The trace is recorded
    with no budget, where a full collect, the only thing that DISCARDs a dead pinned storage,
    ran about a thousand ops later: the replay held the logits through step 2's backward and
    every policy ran out of memory at 0.6-0.7 of the baseline peak, where the live run trains
    at 0.6 (tests/torch/test_remat.py). Now the DISCARD follows the death, and the replay
    fits 0.6 like the live run."""
    trace = tmp_path / "lstm.trace"
    args = ("lstm_lm.py", "--steps", "2")
    run(driver(*args), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    events = [json.loads(l) for l in trace.read_text().splitlines()[1:]]
    released, discarded_late = {}, []
    for i, ev in enumerate(events):
        if ev["INSTRUCTION"] == "RELEASE":
            released[ev["NAME"]] = i
        elif ev["INSTRUCTION"] == "DISCARD" and ev["NAME"] in released:
            if i - released[ev["NAME"]] > 200:
                discarded_late.append((ev["NAME"], i - released[ev["NAME"]]))
    for policy in ("dtr_eq", "msps"):
        sim = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "0.6",
                              "--policy", policy, "--json", "--allocator", "none"],
                             clean_env()).stdout)
        assert sim["status"] == "ok", (policy, sim["status"], discarded_late)
        assert sim["stats"]["dtr.num_remats"] > 0, sim


def test_accumulated_gradients_are_pinned_when_material(lib, tmp_path):
    """Note [Pins when material] (sim/replay.cpp): with gradient accumulation the live host
    pins each gradient reaching a dead input batch only where it is material (Note [Dead
    constants]); the trace says so (PIN with WHEN_MATERIAL, format v3), and a later write
    that reads such a gradient is a plain PIN. Each gradient is pinned as it is written,
    where a run under a budget would pin it (Note [Discards in a trace]), and the replay at
    0.8 of the baseline peak with dead storages kept until the next eviction request, as the
    live host keeps them (Note [Lazy release] in eviction/engine.cpp), fits like the live
    run (2026-11-27: 2.30-2.44 in replays of three 2-step traces; live runs of 3 steps
    2.20-2.46). Before both changes every replay ran out of memory at 0.8."""
    trace = tmp_path / "accumulate.trace"
    args = ("patterns.py", "--pattern", "accumulate", "--steps", "2")
    run(driver(*args), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["VERSION"] == 4
    events = [json.loads(l) for l in lines[1:]]
    made = {r: ev for ev in events if ev["INSTRUCTION"] == "CALL" for r in ev["RESULT"]}
    nbytes = {ev["NAME"]: int(ev["MEMORY"]) for ev in events if ev["INSTRUCTION"] == "MEMORY"}

    def storage_bytes(name):  # an in-place write's result aliases its first argument
        while nbytes.get(name) == 0 and name in made:
            name = made[name]["ARGS"][0]
        return nbytes.get(name, 0)

    soft = [i for i, ev in enumerate(events)
            if ev["INSTRUCTION"] == "PIN" and ev.get("WHEN_MATERIAL") is True
            and storage_bytes(ev["NAME"]) >= 16384]
    # 7 gradients (6 weights and the head's) per step, from the second micro-batch's
    # backward pass on. The biases' are small: pinned when made, and after zero_grad only
    # once the small dead constants they alone reach weigh as much (Note [Small dead
    # constants in bulk]), so not counted here.
    assert len(soft) == 14, len(soft)
    names = {events[i]["NAME"] for i in soft}
    writes = [ev for ev in events[soft[-1] + 1:]
              if ev["INSTRUCTION"] == "PIN" and ev["NAME"] in names and "WHEN_MATERIAL" not in ev]
    assert writes, "the third micro-batch's in-place adds to the pinned gradients"
    calls = [i for i, ev in enumerate(events) if ev["INSTRUCTION"] == "CALL"]
    # Step 1's seven pins come as the gradients are written, not all at one collect.
    first = {sum(1 for c in calls if c < i) for i in soft[:7]}
    assert len(first) > 1, first
    sim = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "0.8",
                          "--policy", "dtr_eq", "--json", "--allocator", "none",
                          "--max-overhead", "0"],
                         clean_env(DTR_CONF="lazy_release:True")).stdout)
    assert sim["status"] == "ok", sim
    assert sim["stats"]["dtr.num_remats"] > 0, sim


def test_tracing_under_a_budget_leaves_the_run_as_untraced(lib, tmp_path):
    """Note [Tracing under a budget] (integration/torch/collector.cpp): under a budget the
    scan before every op that times the trace's RELEASEs only writes them, and dead storages
    stay a free cache until an eviction request, as in an untraced run. When that scan also
    released them, gradient accumulation at 0.8 of its baseline peak ran out of memory in 3
    traced runs of 3 (2026-11-27), where untraced runs train at 0.75 (test_remat.py). The
    traced run is bit-identical, and its trace replays."""
    from test_remat import SCRIPTS
    trace = tmp_path / "accumulate.trace"
    trains_bit_identically(lib, SCRIPTS["accumulate"][0], 0.8, conf=f"trace:{trace}")
    events = [json.loads(l) for l in trace.read_text().splitlines()[1:]]
    # The host holds one reference per tensor (it never retains), so one RELEASE each:
    # written by the scan or by the collector, not by both. The replay ignores extras.
    releases = [ev["NAME"] for ev in events if ev["INSTRUCTION"] == "RELEASE"]
    assert len(releases) == len(set(releases)), "a tensor released twice"
    sim = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "1.0",
                          "--json", "--allocator", "none"], clean_env()).stdout)
    assert sim["status"] == "ok", sim


PLACED = r"""
import numpy as np
import torch
w = torch.empty(1024, 1024)       # 4 MiB, made by an opaque op and filled by another
torch.nn.init.uniform_(w)
with torch.no_grad():
    a = torch.rand(512, 512)      # 1 MiB, seeded: opaque; first read after the mm below
n = torch.from_numpy(np.full((256, 256), 2.0, dtype=np.float32))  # 256 KiB, numpy's
x = torch.full((8, 1024), 0.5)
y = x @ w
z = (y.sum() + a.sum() + n.sum()).item()
"""


def test_a_constant_is_declared_where_it_was_allocated(lib, tmp_path):
    """Note [Constants where they were allocated] (recording.cpp), with option
    trace_constants:allocated: the engine learns of w
    and a only when an op reads them, but memory held them from their allocation on, so
    their CONSTANTs come before x's full and the mm, not at the mm (w) or after it (a).
    Before, a replay of a model's first step counted none of its parameters until the
    forward pass read them. n's memory is numpy's, not our allocator's: it stays where it
    is first read."""
    trace = tmp_path / "placed.trace"
    run([PYTHON, "-c", PLACED],
        clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace},trace_constants:allocated"))
    events = [json.loads(l) for l in trace.read_text().splitlines()[1:]]
    sizes, order = {}, []
    for e in events:
        if e["INSTRUCTION"] == "MEMORY":
            sizes[e["NAME"]] = int(e["MEMORY"])
        elif e["INSTRUCTION"] in ("CONSTANT", "CALL"):
            order.append(e)
    mm = next(i for i, e in enumerate(order)
              if e["INSTRUCTION"] == "CALL" and e["NAME"] == "aten::mm")
    constants = [(i, sizes[e["NAME"]]) for i, e in enumerate(order) if e["INSTRUCTION"] == "CONSTANT"]
    first_call = next(i for i, e in enumerate(order) if e["INSTRUCTION"] == "CALL")  # x's full
    before = [size for i, size in constants if i < first_call]
    after = [size for i, size in constants if i > mm]
    assert sorted(before) == [1 << 20, 4 << 20], (constants, first_call, mm)
    assert after == [256 << 10], (constants, mm)
    # The trace replays (no budget), holding w and a from the start.
    full = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "0",
                           "--json", "--allocator", "none"], clean_env()).stdout)
    assert full["status"] == "ok", full
    assert full["baseline_peak_bytes"] >= (4 << 20) + (1 << 20) + (256 << 10), full
    # Placed constants say so (EARLY), and no plan can be made from such a trace: its
    # storages are not made in the live run's order (Note [Plans number constants at first
    # read]); the default trace declares them where first read, plans and all.
    assert sum(1 for e in events if e.get("EARLY")) == 2, events
    tool = Path(os.environ.get("DTR_PLAN_TOOL", ROOT / "build" / "bin" / "dtr-plan"))
    refused = run([str(tool), "--trace", str(trace), "--budget", "0.9", "--method", "chen"],
                  clean_env(), check=False)
    assert refused.returncode != 0 and "trace_constants:read" in refused.stderr, refused.stderr
    default = tmp_path / "default.trace"
    run([PYTHON, "-c", PLACED], clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{default}"))
    lines = [json.loads(l) for l in default.read_text().splitlines()[1:]]
    kinds = [e["INSTRUCTION"] for e in lines if e["INSTRUCTION"] in ("CONSTANT", "CALL")]
    assert kinds[0] == "CALL" and not any(e.get("EARLY") for e in lines), kinds
