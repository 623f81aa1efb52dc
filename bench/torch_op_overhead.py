"""Per-op bookkeeping cost of libdtr_torch.so with no budget pressure (issue #4): a loop of
small ops (`y = x * 1.0001`, 1024 floats: recorded, allocated, released) timed in fresh
processes with and without the library, interleaved over rounds. What recording, locking
and the collects cost per op is the difference (the Python loop and ATen's own work are in
both):

    /usr/bin/python3 bench/torch_op_overhead.py [--rounds 5] [--batches 60] [--ops 5000]

Note [Timing on a noisy machine]: each process times --batches batches of --ops ops and
keeps its fastest batch (and its 10th percentile), since interference from the rest of the
machine only ever adds time. A process's one long loop, timed whole as this bench did
before, gave a per-op difference of 250 ns in one run and 4613 ns in the next here. A batch
must hold the library's periodic work (a dead scan every 64 ops, a full collect every 1024
or more): with batches of 1000 ops the fastest batch was one without a full collect (2633
ns against 4830 ns at the 10th percentile); with 5000, 2853 and 3048 ns. Reported: the
median over rounds of each process's figure.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

LOOP = """
import sys, time, torch
batches, ops = int(sys.argv[1]), int(sys.argv[2])
x = torch.ones(1024)
for _ in range(2 * ops):
    y = x * 1.0001
per_op = []
for _ in range(batches):
    start = time.perf_counter()
    for _ in range(ops):
        y = x * 1.0001
    per_op.append((time.perf_counter() - start) / ops)
per_op.sort()
print(f"time 0 {per_op[0]:.9f}")
print(f"time 1 {per_op[len(per_op) // 10]:.9f}")
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--ops", type=int, default=5000, help="ops per timed batch")
    args = parser.parse_args()
    with open("/tmp/dtr_op_overhead.py", "w") as f:
        f.write(LOOP)
    # config -> [(fastest batch, 10th percentile) per round], ns per op
    per_op = {"plain": [], "dtr": []}
    for _ in range(args.rounds):
        for config, kw in (("plain", dict(library=False)), ("dtr", dict(conf=None))):
            run = runs.run("/tmp/dtr_op_overhead.py", [args.batches, args.ops], threads=1, **kw)
            if run.returncode:
                runs.fail(f"{config} failed", run)
            per_op[config].append([t * 1e9 for t in run.step_times()])
    for k, name in enumerate(("fastest batch", "10th percentile batch")):
        plain = runs.median([r[k] for r in per_op["plain"]])
        dtr = runs.median([r[k] for r in per_op["dtr"]])
        print(f"{name}: plain {plain:.0f} ns, with dtr {dtr:.0f} ns per op: bookkeeping "
              f"{dtr - plain:.0f} ns per op (median of {args.rounds} interleaved rounds of "
              f"{args.batches} batches of {args.ops} ops)")


if __name__ == "__main__":
    main()
