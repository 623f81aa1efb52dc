"""What `auto`'s trial costs a run, against a run that names its policy: a residual MLP deep
and narrow enough that the program holds thousands of storages (tests/torch/scripts/mlp.py
--residual, min_evictable:4K), trained for a few steps under a budget, in fresh processes
interleaved over rounds, under policy:dtr_eq, auto with trial:live, and auto with its
default trial by replay (which records the first two steps for its replays: Note [Deaths
in the trial's trace] in integration/torch/collector.cpp).

    /usr/bin/python3 bench/torch_trial_cost.py [--rounds 3] [--depth 2000] [--fraction 0.6]

Reported: the median wall time of each, its ratio to policy:dtr_eq's, and each run's
dtr.policy line from the last round. Wall time of the whole process, so it includes
start-up; the ratios are what to read.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

SCRIPT = ROOT / "tests" / "torch" / "scripts" / "mlp.py"
CONFS = {"dtr_eq": "policy:dtr_eq", "auto, trial:live": "policy:auto,trial:live",
         "auto (trial by replay)": "policy:auto"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depth", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    script_args = ["--width", "64", "--batch", "48", "--steps", str(args.steps), "--residual",
                   "--depth", str(args.depth)]
    peak_run = runs.run(SCRIPT, script_args, conf="min_evictable:4K,remat:False",
                        threads=args.threads)
    if peak_run.returncode != 0:
        runs.fail("the run without a budget failed", peak_run)
    budget = int(args.fraction * peak_run.report["allocated_bytes.all.peak"])
    print(f"mlp.py {' '.join(script_args)}: peak "
          f"{peak_run.report['allocated_bytes.all.peak'] / 2**20:.1f} MiB, budget {budget} B "
          f"({args.fraction}), {args.threads} threads, {args.rounds} rounds")
    times = {name: [] for name in CONFS}
    policies = {}
    for _ in range(args.rounds):
        for name, conf in CONFS.items():
            r = runs.run(SCRIPT, script_args, conf=f"min_evictable:4K,budget:{budget},{conf}",
                         threads=args.threads)
            if r.returncode != 0:
                runs.fail(f"{name} failed", r)
            times[name].append(r.wall_s)
            policies[name] = r.report.get("dtr.policy", "")
    base = runs.median(times["dtr_eq"])
    print("| run | median wall | ratio to dtr_eq | runs |")
    print("| --- | --- | --- | --- |")
    for name in CONFS:
        m = runs.median(times[name])
        print(f"| {name} | {m:.2f} s | {m / base:.3f} | "
              f"{', '.join(f'{t:.2f}' for t in times[name])} |")
    for name in CONFS:
        print(f"{name}: {policies[name]}")


if __name__ == "__main__":
    main()
