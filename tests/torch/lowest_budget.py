"""Finds the lowest budget, as a fraction of the baseline peak, under which an unmodified
script still trains bit for bit with dtr (the "lowest feasible" column of test_remat.py):

    /usr/bin/python3 tests/torch/lowest_budget.py [--start 1.0] [--low 0.1] [--step 0.05] \
        [--repeat 1] [--conf key:value,...] -- script.py args...

The baseline peak is the run's under dtr's allocator with remat:False. Prints one line per
try (fraction, budget, outcome, evictions, remats, wall time) and the lowest fraction
that passed. A try passes when the run exits 0, its losses, parameters and buffers equal
the run without the library, and its peak stays within the budget. A fraction passes when
all its --repeat tries pass (the costs the policy scores are measured op times, so two
runs may evict differently: test_remat.py keeps fractions that passed three in three); the
search stops at the first fraction with a failed try, after finishing its tries, and
prints how many of them passed. A try that passed after the library warned of thrashing
(Note [Thrashing in a live run]: its remats took more than max_overhead times its ops)
reads `ok, thrashed`; the last line also gives the lowest fraction none of whose tries
thrashed, down to there.
"""
import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
from dtr import runs  # noqa: E402


def try_budget(script, args, conf, budget, ref, fraction):
    """One run under `conf`: prints its line, returns (passed, passed after a thrash
    warning)."""
    run = runs.run(script, args, conf=conf)
    if run.returncode != 0:
        # A Python exception's line, else dtr's own (an internal check stops the process
        # with SIGABRT, and no traceback), else the last line, with the exit status.
        lines = [l for l in run.stderr.splitlines() if l.strip()]
        errors = ([l for l in lines if "Error" in l] or
                  [l for l in lines if l.startswith(("dtr: internal", "dtr: fatal"))] or
                  [f"exit status {run.returncode}: " + (lines[-1] if lines else "no stderr")])
        outcome = "fail: " + errors[-1][:160]
    elif run.state() != ref.state():
        outcome = "DIFFERENT RESULTS"
    elif run.peak_bytes > budget:
        outcome = "OVER BUDGET"
    elif run.report.get("dtr.num_thrash_alerts", 0) > 0:
        outcome = "ok, thrashed"
    else:
        outcome = "ok"
    print(f"{fraction:.2f} {budget / 2**20:8.1f} MiB {outcome:30.30s} evictions "
          f"{run.report.get('dtr.num_evictions', '-')} remats "
          f"{run.report.get('dtr.num_remats', '-')} {run.wall_s:.1f} s", flush=True)
    if outcome.startswith("fail"):
        print("   ", outcome)
    return outcome.startswith("ok"), outcome == "ok, thrashed"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", type=float, default=1.0)
    parser.add_argument("--low", type=float, default=0.1)
    parser.add_argument("--step", type=float, default=0.05)
    parser.add_argument("--conf", default="", help="extra DTR_CONF entries")
    parser.add_argument("--repeat", type=int, default=1, help="tries per fraction")
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.script[1:] if args.script[:1] == ["--"] else args.script
    script = Path(argv[0]) if Path(argv[0]).exists() else HERE / "scripts" / argv[0]
    ref = runs.run(script, argv[1:], library=False)
    if ref.returncode != 0:
        runs.fail("the script fails without the library", ref)
    free = runs.run(script, argv[1:], conf="remat:False")
    print(f"baseline: peak {free.peak_bytes / 2**20:.1f} MiB, {ref.wall_s:.1f} s without the "
          "library")
    fraction, lowest, lowest_calm, calm = args.start, None, None, True
    while fraction >= args.low - 1e-9:
        budget = int(free.peak_bytes * fraction)
        conf = f"budget:{budget}" + (f",{args.conf}" if args.conf else "")
        tries = [try_budget(script, argv[1:], conf, budget, ref, fraction)
                 for _ in range(args.repeat)]
        passed = sum(ok for ok, _ in tries)
        if passed < args.repeat:
            if args.repeat > 1:
                print(f"{fraction:.2f}: {passed} of {args.repeat} tries passed")
            break
        lowest = fraction
        calm = calm and not any(thrashed for _, thrashed in tries)
        if calm:
            lowest_calm = fraction
        fraction = round(fraction - args.step, 4)
    print(f"lowest feasible fraction: {lowest} (without a thrash warning: {lowest_calm})")


if __name__ == "__main__":
    main()
