"""Per-op bookkeeping cost of libdtr_torch.so with no budget pressure (issue #4): a loop of
small ops (`y = x * 1.0001`, 1024 floats: recorded, allocated, released) timed in fresh
processes with and without the library, interleaved over rounds; prints the median time
per op of each and the difference, which is what recording, locking and the collects
cost per op (the Python loop and ATen's own work are in both):

    /usr/bin/python3 bench/torch_op_overhead.py [--rounds 5] [--ops 200000]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

LOOP = """
import sys, time, torch
n = int(sys.argv[1])
x = torch.ones(1024)
for _ in range(1000):
    y = x * 1.0001
start = time.perf_counter()
for _ in range(n):
    y = x * 1.0001
print(f"time 0 {(time.perf_counter() - start) / n:.9f}")
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=200000)
    args = parser.parse_args()
    with open("/tmp/dtr_op_overhead.py", "w") as f:
        f.write(LOOP)
    per_op = {"plain": [], "dtr": []}
    for _ in range(args.rounds):
        for config, kw in (("plain", dict(library=False)), ("dtr", dict(conf=None))):
            run = runs.run("/tmp/dtr_op_overhead.py", [args.ops], threads=1, **kw)
            if run.returncode:
                runs.fail(f"{config} failed", run)
            per_op[config].append(run.step_times()[0] * 1e9)
    plain, dtr = runs.median(per_op["plain"]), runs.median(per_op["dtr"])
    print(f"per op: plain {plain:.0f} ns, with dtr {dtr:.0f} ns: bookkeeping {dtr - plain:.0f} ns "
          f"per op (median of {args.rounds} interleaved rounds)")


if __name__ == "__main__":
    main()
