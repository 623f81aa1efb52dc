"""Finds the lowest budget, as a fraction of the baseline peak, under which an unmodified
script still trains bit for bit with dtr (the "lowest feasible" column of test_remat.py):

    /usr/bin/python3 tests/torch/lowest_budget.py [--lib build/lib/libdtr_torch.so] \
        [--start 1.0] [--low 0.1] [--step 0.05] -- script.py args...

Prints one line per try (fraction, budget, outcome, evictions, remats, wall time) and
the lowest fraction that passed. A try passes when the run exits 0, prints the same
lines as the run without the library, and stays within the budget.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run(argv, env):
    start = time.time()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    return proc, time.time() - start


def facts(proc):
    lines, stats = [], {}
    for line in proc.stdout.splitlines():
        if line.startswith("DTR_TEST stats "):
            stats = json.loads(line[len("DTR_TEST stats "):])
        elif not line.startswith(("DTR_TEST ", "time ")):  # step times differ run to run
            lines.append(line)
    return lines, stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", default=str(ROOT / "build" / "lib" / "libdtr_torch.so"))
    parser.add_argument("--start", type=float, default=1.0)
    parser.add_argument("--low", type=float, default=0.1)
    parser.add_argument("--step", type=float, default=0.05)
    parser.add_argument("--conf", default="", help="extra DTR_CONF entries")
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    script[0] = str(HERE / "scripts" / script[0]) if not os.path.exists(script[0]) else script[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTR_") and k != "LD_PRELOAD"}
    env.update(PYTHONPATH=str(ROOT / "python"), OMP_NUM_THREADS="2")
    argv = [sys.executable, str(HERE / "scripts" / "run_script.py"), "--", *script]
    ref, ref_s = run(argv, env)
    if ref.returncode != 0:
        sys.exit(f"the script fails without the library:\n{ref.stderr}")
    ref_lines, _ = facts(ref)
    free, _ = run(argv, dict(env, LD_PRELOAD=args.lib, DTR_CONF="remat:False"))
    peak = facts(free)[1]["allocated_bytes.all.peak"]
    print(f"baseline: peak {peak / 2**20:.1f} MiB, {ref_s:.1f} s without the library")
    fraction, lowest = args.start, None
    while fraction >= args.low - 1e-9:
        budget = int(peak * fraction)
        conf = f"budget:{budget}" + (f",{args.conf}" if args.conf else "")
        proc, secs = run(argv, dict(env, LD_PRELOAD=args.lib, DTR_CONF=conf))
        lines, stats = facts(proc)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
            outcome = "fail: " + tail[0][:160]
        elif lines != ref_lines:
            outcome = "DIFFERENT RESULTS"
        elif stats.get("allocated_bytes.all.peak", 0) > budget:
            outcome = "OVER BUDGET"
        else:
            outcome = "ok"
        print(f"{fraction:.2f} {budget / 2**20:8.1f} MiB {outcome:30.30s} "
              f"evictions {stats.get('dtr.num_evictions', '-')} remats "
              f"{stats.get('dtr.num_remats', '-')} {secs:.1f} s", flush=True)
        if outcome != "ok":
            if outcome.startswith("fail"):
                print("   ", outcome)
            break
        lowest = fraction
        fraction = round(fraction - args.step, 4)
    print(f"lowest feasible fraction: {lowest}")


if __name__ == "__main__":
    main()
