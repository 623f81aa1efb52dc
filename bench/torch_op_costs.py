"""Which op costs should the policy score: each op's own measured time, or the median of
its signature's last runs (option op_cost, Note [Noisy op times] in eviction/op_costs.cpp)?
Step times on this machine are too noisy to tell a few percent apart, so this compares the
decisions instead, without noise in the verdict:

    /usr/bin/python3 bench/torch_op_costs.py [--runs 3] [--budgets 0.5,0.6,0.7]
        [--policies dtr_eq,msps] -- script.py args...

It records --runs traces of the script with no budget (op_cost:median, so each CALL has
its measured TIME and, where it differs, the median estimate as REMAT_TIME). For each
trace A and the next one B (in a ring), and each policy and budget (a ratio of A's
baseline peak), dtr-sim replays A twice: scoring the measured times (REMAT_TIME dropped)
and scoring the estimates (as recorded). Each replay's remats are then charged what the
same ops took in run B, a run the choice knew nothing of, as a real remat pays a fresh
run's time: overhead = 1 + sum over remats of B's time / B's total. A packed dropout
mask's REMAT_TIME is its unpack (Note [Packed masks]) and is kept in both replays. First
it says, per trace, how many calls took over twice their signature's median, and how much
of the measured time is that excess.
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

MASK = "aten::bernoulli_"


def read(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def calls_of(events):
    return [e for e in events if e["INSTRUCTION"] == "CALL"]


def remats(sim, trace, calls, policy, budget, timeline):
    """Indices (in CALL order) of the calls a replay recomputed, once per remat; None if
    the replay did not finish."""
    proc = subprocess.run([sim, "run", "--trace", str(trace), "--policy", policy, "--budget",
                           budget, "--allocator", "none", "--max-overhead", "0", "--json",
                           "--timeline", str(timeline)], capture_output=True, text=True)
    if proc.returncode != 0 or json.loads(proc.stdout)["status"] != "ok":
        return None
    events = json.loads(Path(timeline).read_text())["traceEvents"]
    # Engine op ids count constants too: walk the op events in id order beside the calls.
    ops = sorted((e for e in events if e.get("cat") == "op"), key=lambda e: e["args"]["op"])
    index = {}
    for e in ops:
        if len(index) < len(calls) and e["name"] == calls[len(index)]["NAME"]:
            index[e["args"]["op"]] = len(index)
    if len(index) != len(calls):
        runs.fail(f"the timeline of {trace} does not follow its calls")
    return [index[e["args"]["op"]] for e in events if e.get("cat") == "remat"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budgets", default="0.5,0.6,0.7")
    parser.add_argument("--policies", default="dtr_eq,msps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sim", default=str(ROOT / "build" / "bin" / "dtr-sim"))
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = [a for a in args.script if a != "--"]
    if not script or args.runs < 2:
        parser.error("give --runs >= 2 and a script: -- script.py args...")
    tmp = Path(tempfile.mkdtemp(prefix="dtr-op-costs-"))
    traces = []
    for i in range(args.runs):
        trace = tmp / f"run{i}.trace"
        run = runs.run(script[0], script[1:], conf=f"trace:{trace},op_cost:median",
                       threads=args.threads)
        if run.returncode != 0:
            runs.fail(f"run {i} failed", run)
        traces.append(trace)
        # How noisy the measurements were: calls measured at over twice the estimate.
        calls = calls_of(read(trace))
        over = [c for c in calls
                if c["NAME"] != MASK and c["TIME"] > 2 * c.get("REMAT_TIME", c["TIME"])]
        print(f"{trace.name}: {len(over)} of {len(calls)} calls took over twice their "
              f"signature's median; {sum(c['TIME'] - c['REMAT_TIME'] for c in over) / 1e6:.0f} "
              f"of {sum(c['TIME'] for c in calls) / 1e6:.0f} ms measured is their excess",
              flush=True)
    print("| scored on | charged at | policy | budget | measured: overhead (remats) |"
          " median: overhead (remats) | median - measured |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    gains = {p: [] for p in args.policies.split(",")}
    for i, a in enumerate(traces):
        b = traces[(i + 1) % len(traces)]
        events = read(a)
        charged = calls_of(read(b))
        if [c["NAME"] for c in calls_of(events)] != [c["NAME"] for c in charged]:
            runs.fail(f"{a.name} and {b.name} ran different ops; the script is not "
                      "deterministic in its op sequence")
        measured = tmp / f"run{i}-measured.trace"
        measured.write_text("".join(
            json.dumps({k: v for k, v in e.items()
                        if k != "REMAT_TIME" or e["NAME"] == MASK}) + "\n"
            if e["INSTRUCTION"] == "CALL" else json.dumps(e) + "\n" for e in events))
        cost = [c.get("REMAT_TIME", c["TIME"]) if c["NAME"] == MASK else c["TIME"]
                for c in charged]
        total = sum(c["TIME"] for c in charged)
        for policy in gains:
            for budget in args.budgets.split(","):
                cells = []
                for trace in (measured, a):
                    done = remats(args.sim, trace, charged, policy, budget,
                                  tmp / "timeline.json")
                    cells.append(None if done is None else
                                 (1 + sum(cost[k] for k in done) / total, len(done)))
                text = [f"{c[0]:.3f} ({c[1]})" if c else "failed" for c in cells]
                diff = ""
                if all(cells):
                    gains[policy].append(cells[1][0] - cells[0][0])
                    diff = f"{cells[1][0] - cells[0][0]:+.3f}"
                print(f"| {a.name} | {b.name} | {policy} | {budget} | {text[0]} | {text[1]} |"
                      f" {diff} |", flush=True)
    print()
    for policy, g in gains.items():
        if g:
            print(f"{policy}: median - measured over {len(g)} cells: mean {sum(g) / len(g):+.4f},"
                  f" min {min(g):+.3f}, max {max(g):+.3f}, median better in"
                  f" {sum(1 for x in g if x < 0)}")


if __name__ == "__main__":
    main()
