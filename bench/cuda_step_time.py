"""cuda_step_time.py: resnet18 training steps on a GPU, PyTorch's allocator vs dtr's.

    /path/to/python3 bench/cuda_step_time.py [--library [NAME=]PATH ...]
        [--rounds 5] [--steps 20] [--budget 8G]

Each round runs one process per allocator back to back (tests/cuda/pluggable_child.py
time): PyTorch's own CUDA caching allocator, then each --library (default
build/lib/libdtr_cuda.so) as dtr_malloc/dtr_free through CUDAPluggableAllocator (PyTorch
>= 2.0), the order rotating from round to round. Each process times STEPS steps (batch 64,
128x128 images) after 3 warm-up steps and reports its median; the table gives the median
over rounds of each and its ratio to PyTorch's. Needs a CUDA device.

`--library floor=build/lib/libcuda_floor.so` (bench/cuda_floor_allocator.cpp) adds
the cheapest pluggable allocator as a row, which splits the pluggable route's cost into
PyTorch's CUDAPluggableAllocator wrapper (floor against PyTorch's) and dtr's own (dtr
against floor).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "cuda" / "pluggable_child.py"


def run(library, steps, budget):
    env = dict(os.environ)
    env.pop("DTR_CONF", None)
    env["DTR_BUDGET"] = budget
    done = subprocess.run([sys.executable, str(CHILD), "time", library, str(steps)],
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"cuda_step_time.py: the child failed ({library}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", action="append", metavar="[NAME=]PATH",
                        help="a libdtr_cuda.so to time (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--budget", default="8G", help="DTR_BUDGET for the dtr runs")
    args = parser.parse_args()
    runs = [("PyTorch's CUDA caching allocator", "-")]
    for spec in args.library or [str(ROOT / "build" / "lib" / "libdtr_cuda.so")]:
        name, _, path = spec.rpartition("=")
        if not pathlib.Path(path).exists():
            sys.exit(f"cuda_step_time.py: {path} does not exist; build with DTR_WITH_CUDA=ON")
        runs.append((name or f"dtr_malloc ({path})", path))
    times = {name: [] for name, _ in runs}
    peaks = {}
    requests = None  # allocations per step, from PyTorch's own allocator's count
    for round_ in range(args.rounds):
        shift = round_ % len(runs)
        for name, library in runs[shift:] + runs[:shift]:
            result = run(library, args.steps, args.budget)
            times[name].append(result["median_step_s"])
            peaks[name] = (result["peak_allocated"], result["peak_reserved"])
            if result.get("allocations") and name == runs[0][0]:
                requests = result["allocations"] / (args.steps + 3)
        print(f"round {round_ + 1}: " + ", ".join(
            f"{name} {times[name][-1] * 1e3:.2f} ms" for name, _ in runs), flush=True)
    base = statistics.median(times[runs[0][0]])
    print(f"resnet18, batch 64, 128x128, {args.steps} steps per process, "
          f"median of {args.rounds} processes each")
    per_step = f"{requests:.0f}" if requests else "?"
    print(f"{per_step} allocations per step (PyTorch's count, warm-up steps included)")
    print("| allocator | median step (ms) | ratio | extra us per allocation "
          "| peak allocated / reserved (MiB, last round) |")
    print("| --- | --- | --- | --- | --- |")
    for name, _ in runs:
        median = statistics.median(times[name])
        allocated, reserved = peaks[name]
        extra = f"{(median - base) * 1e6 / requests:.2f}" if requests else "?"
        memory = ("n/a" if allocated is None
                  else f"{allocated / 2**20:.1f} / {reserved / 2**20:.1f}")
        print(f"| {name} | {median * 1e3:.2f} | {median / base:.3f} | {extra} | {memory} |")

if __name__ == "__main__":
    main()
