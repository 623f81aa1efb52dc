"""Cost of the library with no budget on a program that holds many small tensors (Note [Scan
credit] in integration/torch/lineage.cpp): K one-element parameters stacked into one loss
and trained with Adam, timed in fresh processes with and without the library, interleaved
over rounds, at each K. A cost that grows with the square of K shows as a ratio that grows
with K; before 2026-12-03 the library's first Adam step over 5000 such parameters took 6.2 s
against 0.46 s (torch.stack of them 1.21 s against 0.02 s).

    /usr/bin/python3 bench/torch_many_tensors.py [--rounds 3] [--counts 2500,5000,10000]

Reported per K: the median over rounds of the first step (Adam makes its state there, so
the program's memory grows at every op) and of the second (steady), plain and with the
library, and their ratios.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

STEPS = """
import sys, time, torch, torch.nn as nn
torch.manual_seed(0)
K = int(sys.argv[1])
tiny = nn.ParameterList([nn.Parameter(torch.randn(1) * 0.01) for _ in range(K)])
opt = torch.optim.Adam(tiny.parameters(), lr=1e-3)
for step in range(2):
    start = time.perf_counter()
    opt.zero_grad()
    torch.stack(list(tiny)).pow(2).sum().backward()
    opt.step()
    print(f"time {step} {time.perf_counter() - start:.6f}", flush=True)
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--counts", default="2500,5000,10000")
    args = parser.parse_args()
    with open("/tmp/dtr_many_tensors.py", "w") as f:
        f.write(STEPS)
    print(f"{'K':>6} {'first step plain':>17} {'with dtr':>9} {'ratio':>6} "
          f"{'second step plain':>18} {'with dtr':>9} {'ratio':>6}")
    for count in (int(k) for k in args.counts.split(",")):
        times = {"plain": [], "dtr": []}  # per round: [first step, second step]
        for _ in range(args.rounds):
            for config, kw in (("plain", dict(library=False)), ("dtr", dict(conf=None))):
                run = runs.run("/tmp/dtr_many_tensors.py", [count], threads=1, **kw)
                if run.returncode:
                    runs.fail(f"{config} failed", run)
                times[config].append(run.step_times())
        row = []
        for step in (0, 1):
            plain = runs.median([t[step] for t in times["plain"]])
            dtr = runs.median([t[step] for t in times["dtr"]])
            row += [plain, dtr, dtr / plain]
        print(f"{count:>6} {row[0]:>15.3f} s {row[1]:>7.3f} s {row[2]:>6.2f} "
              f"{row[3]:>16.3f} s {row[4]:>7.3f} s {row[5]:>6.2f}")


if __name__ == "__main__":
    main()
