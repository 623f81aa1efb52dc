"""`make demo`: an unmodified training script (tests/torch/scripts/vision.py: torchvision
resnet18 on small random images) run twice through libdtr_torch.so, first with no budget
and no eviction (remat:False: dtr's allocator only measures the peak), then under a hard
budget of half that peak, with eviction and rematerialization on (if half does not fit,
the next fraction in --fractions, and it says so). Prints both peaks, both median step
times, the evictions and remats, and whether losses and final parameters match bit for
bit.

    /usr/bin/python3 tools/torch_demo.py [--fractions 0.5,0.6,0.7] [--steps 4] [script args...]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402


def mib(n):
    return f"{n / 2**20:.1f} MiB"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fractions", default="0.5,0.6,0.7")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--script", default=str(ROOT / "tests/torch/scripts/vision.py"))
    args, rest = parser.parse_known_args()
    script_args = ["--steps", str(args.steps), *rest]
    if not runs.library_path().exists():
        runs.fail(f"{runs.library_path()} is not built: run `make build` first")

    print(f"== {Path(args.script).name} {' '.join(script_args)}, no budget (remat:False)")
    free = runs.run(args.script, script_args, conf="remat:False")
    if free.returncode != 0:
        runs.fail("the script failed without a budget", free)
    for fraction in map(float, args.fractions.split(",")):
        budget = int(free.peak_bytes * fraction)
        print(f"== the same script under a budget of {mib(budget)} ({fraction}x its peak)")
        under = runs.run(args.script, script_args, conf=f"budget:{budget}")
        if under.returncode == 0:
            break
        errors = [l for l in under.stderr.splitlines() if "OutOfMemoryError" in l] or ["?"]
        print(f"   does not fit: {errors[-1][:220]}")
    else:
        runs.fail(f"the script failed under every budget in {args.fractions}", under)

    rows = [("", "no budget", f"budget {fraction}x"),
            ("peak live tensor bytes", mib(free.peak_bytes), mib(under.peak_bytes)),
            # what the caching allocator held, cached free segments included: the budget
            # caps live bytes only (option reserved_limit caps this; docs/pytorch.md)
            ("peak reserved bytes", mib(free.report["reserved_bytes.all.peak"]),
             mib(under.report["reserved_bytes.all.peak"])),
            ("peak RSS of the process", mib(free.max_rss_kib * 1024),
             mib(under.max_rss_kib * 1024)),
            # the first step also builds the model's caches: the median of the others
            ("median step time", f"{runs.median(free.step_times()[1:]):.3f} s",
             f"{runs.median(under.step_times()[1:]):.3f} s"),
            ("evictions / remats", "0 / 0",
             f"{under.report['dtr.num_evictions']} / {under.report['dtr.num_remats']}")]
    for a, b, c in rows:
        print(f"  {a:24s} {b:>14s} {c:>16s}")
    same = free.state() == under.state() and free.losses()
    print(f"  losses {' '.join(free.losses())} vs {' '.join(under.losses())}")
    print(f"  losses and final parameters bit-identical: {'yes' if same else 'NO'}")
    if not same or under.peak_bytes > budget:
        sys.exit(1)


if __name__ == "__main__":
    main()
