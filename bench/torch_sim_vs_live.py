"""How close dtr-sim's prediction is to the live run (issue #4): records an unmodified
script's run with DTR_TRACE (no budget), and at each fraction of the live allocator-only
peak runs the script live and replays the trace in dtr-sim at the same budget in bytes.
Prints the live allocator-only peak beside the replay's baseline peak, then, per
fraction, the overhead (1 + remat compute / model compute) and the peak of each, side by
side. The replay runs twice: as DTR's simulator would (dtr_eq), and as the
host runs (dtr.runs.HOST_MODEL): lazy_release:True, which models how the live host learns
of deaths (Note [Dead storages in the replay] below), and the host's own defaults:

    /usr/bin/python3 bench/torch_sim_vs_live.py [--fractions 0.7,0.6] -- script.py args...

With --memory-curve it first compares, without a budget, the live allocated bytes after
each recorded op (DTR_TIMELINE) with the replay's (dtr-sim run --timeline), op by op:
the mean and largest gap as a fraction of the live peak, and the mean over each half of
the run (the first step is where a trace that declared memory late fell short: Note
[Constants where they were allocated] in integration/torch/recording.cpp; the trace is
recorded with trace_constants:allocated). --library runs another build of the library
(the replays use --sim; a build older than that option stops at start on it).

With --reserved-limits 1.05,1.1,1.5 (factors of each budget) a second table compares, for
each limit, compaction on and off, whether the live run under that `reserved_limit` trains
and whether dtr-sim's replay under `--reserved-limit` does, with the blocks each moved
(docs/simulator.md, "Reserved limit and compaction").
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

# Note [Dead storages in the replay]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The live host finds dead storages only when it scans: at an eviction request, where it
# frees all it finds before the policy evicts anything live, and every 64 ops (Note
# [Temporaries] in integration/torch/lineage.cpp). Until then a dead storage stays
# material, and the next op's remats read it rather than recompute it. simrd evicts a
# storage at its release. The engine's lazy_release option keeps it until the next
# eviction request, as the host does (Note [Lazy release] in eviction/engine.cpp). On
# gradient accumulation (patterns.py --pattern accumulate --steps 3) that decides the
# outcome: at 0.8 of the peak every default replay ran out of memory, where live runs
# train with overhead 2.20-2.46; the lazy_release replays of three traces gave 1.59-1.84
# (2026-11-27). dead_first:True (Note [Dead storages first]), the closer model before,
# frees only the dead storages a remat brought back first, and still ran out of memory
# at 0.8 in one trace of three. See docs/pytorch.md, "Simulator against the live run".
HOST_MODEL = runs.HOST_MODEL
# The policy of every run, live and replayed, so that the two sides compare like with like
# (the live default, auto, needs step marks a replay of DTR's kind does not model).
POLICY = "dtr_eq"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fractions", default="0.7,0.6")
    parser.add_argument("--reserved-limits", default="",
                        help="factors of the budget: also compare runs under reserved_limit")
    parser.add_argument("--sim", default=str(ROOT / "build" / "bin" / "dtr-sim"))
    parser.add_argument("--memory-curve", action="store_true",
                        help="also compare the live and replayed bytes op by op, no budget")
    parser.add_argument("--library", default=None, help="another build of libdtr_torch.so")
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    path = Path(script[0])
    if not path.exists():
        path = ROOT / "tests" / "torch" / "scripts" / script[0]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "run.trace"
        library = args.library or True
        free = runs.run(path, script[1:], conf="remat:False", library=library)
        timeline = Path(tmp) / "live.json"
        curve = f",timeline:{timeline}" if args.memory_curve else ""
        # Constants where they were allocated: the replay holds memory as the live run did
        # (Note [Constants where they were allocated] in integration/torch/recording.cpp).
        traced = runs.run(path, script[1:], conf=f"trace:{trace},trace_constants:allocated{curve}",
                          library=library)
        if free.returncode or traced.returncode or not trace.exists():
            runs.fail("the baseline or the traced run failed", traced)
        if args.memory_curve:
            print_memory_curve(args.sim, trace, timeline, Path(tmp) / "replay.json")
        # The replay's own baseline: with the ops' scratch in the trace (WORKSPACE, Note [Op
        # workspace] in eviction/engine.cpp) it meets the live one within block rounding.
        unlimited = runs.simulate(args.sim, trace, POLICY, 0)
        if unlimited is None:
            runs.fail(f"dtr-sim failed on {trace} without a budget")
        print(f"{path.name}: live baseline peak {free.peak_bytes / 2**20:.1f} MiB, replayed "
              f"{unlimited['baseline_peak_bytes'] / 2**20:.1f} MiB; trace of "
              f"{traced.report['dtr.num_ops']} ops")
        print("| budget | live overhead | sim overhead | live peak | sim peak | live evictions |"
              " sim evictions | sim status | sim as the host: overhead, status |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for fraction in map(float, args.fractions.split(",")):
            live = runs.run(path, script[1:],
                            conf=f"budget:{int(free.peak_bytes * fraction)},policy:{POLICY}",
                            library=library)
            sim = runs.simulate(args.sim, trace, POLICY, free.peak_bytes * fraction)
            host = runs.simulate(args.sim, trace, POLICY, free.peak_bytes * fraction,
                                 conf=HOST_MODEL)
            if sim is None or host is None:
                runs.fail(f"dtr-sim failed on {trace} at {fraction}")
            if live.returncode:
                live_cells = ["failed", "-", "-"]
            else:
                r = live.report
                live_cells = [f"{1 + r['dtr.remat_compute_ns'] / r['dtr.model_compute_ns']:.3f}",
                              f"{r['allocated_bytes.all.peak'] / 2**20:.1f} MiB",
                              str(r["dtr.num_evictions"])]
            print(f"| {fraction} | {live_cells[0]} | {sim['overhead']:.3f} | {live_cells[1]} | "
                  f"{sim['peak_bytes'] / 2**20:.1f} MiB | {live_cells[2]} | "
                  f"{sim['evictions']} | {sim['status']} | "
                  f"{host['overhead']:.3f}, {host['status']} |")
        if args.reserved_limits:
            compare_reserved_limits(args, path, script[1:], trace, free.peak_bytes)


def allocated_after_ops(path, program_ops_only):
    """The allocated bytes after each op span of a Chrome trace (a live DTR_TIMELINE or
    dtr-sim's --timeline), in order; the replay's CONSTANT spans are left out."""
    data = json.loads(Path(path).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") != "remat" and
                    not (program_ops_only and e["name"] == "constant")), key=lambda e: e["ts"])
    counter = sorted((e["ts"], e["args"]["bytes"]) for e in events
                     if e.get("ph") == "C" and e["name"] == "allocated")
    out, j = [], 0
    for span in spans:
        end = span["ts"] + span.get("dur", 0)
        while j < len(counter) - 1 and counter[j][0] < end - 1e-6:
            j += 1
        out.append(counter[j][1])
    return out


def print_memory_curve(sim, trace, live_timeline, replay_timeline):
    proc = subprocess.run([str(sim), "run", "--trace", str(trace), "--policy", POLICY,
                           "--budget", "0", "--allocator", "none", "--timeline",
                           str(replay_timeline)], capture_output=True, text=True)
    if proc.returncode:
        runs.fail(f"dtr-sim --timeline failed on {trace}: {proc.stderr}")
    live = allocated_after_ops(live_timeline, False)
    replay = allocated_after_ops(replay_timeline, True)
    n = len(live)
    if n < 2 or n != len(replay):
        print(f"memory curve: {n} live ops against {len(replay)} replayed; not compared")
        return
    peak = max(live)
    gaps = [abs(live[i] - replay[i]) / peak for i in range(n)]
    half = n // 2
    print(f"memory curve, no budget ({n} ops): mean gap {sum(gaps) / n:.4f} of the live peak "
          f"(first half {sum(gaps[:half]) / half:.4f}, second {sum(gaps[half:]) / (n - half):.4f}),"
          f" largest {max(gaps):.4f}")


def outcome(live):
    if live.returncode == 0:
        return "trains"
    return "out of memory" if "out of memory" in live.stderr else f"failed ({live.returncode})"


def compare_reserved_limits(args, path, script_args, trace, peak):
    print()
    print("| budget | reserved_limit | compact | live | replay | live: moved, reserved peak |"
          " replay: moved, reserved peak, overhead |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for fraction in map(float, args.fractions.split(",")):
        budget = int(peak * fraction)
        for factor in map(float, args.reserved_limits.split(",")):
            limit = int(budget * factor)
            for compact in ("True", "False"):
                live = runs.run(path, script_args, conf=f"budget:{budget},reserved_limit:{limit},"
                                                         f"compact:{compact},policy:{POLICY}")
                sim = runs.simulate(args.sim, trace, POLICY, budget,
                                    conf=f"compact:{compact},dead_first:True",
                                    reserved_limit=limit)
                if sim is None:
                    runs.fail(f"dtr-sim failed on {trace} at {budget} B, limit {limit} B")
                r = live.report
                live_cells = (f"{r.get('dtr.num_block_moves', 0)}, "
                              f"{r['reserved_bytes.all.peak'] / 2**20:.1f} MiB" if r else "-")
                a = sim["allocator_stats"]
                replay = "trains" if sim["status"] == "ok" else {"oom": "out of memory"}.get(
                    sim["status"], sim["status"])
                print(f"| {fraction} ({budget / 2**20:.1f} MiB) | {factor}x | {compact} | "
                      f"{outcome(live)} | {replay} | {live_cells} | "
                      f"{a['dtr.num_block_moves']}, {sim['peak_reserved_bytes'] / 2**20:.1f} MiB, "
                      f"{sim['overhead']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
