"""`make demo`: an unmodified training script (tests/torch/scripts/vision.py: torchvision
resnet18 on small random images) run twice through libdtr_torch.so, first with no budget
and no eviction (remat:False: dtr's allocator only measures the peak), then under a hard
budget of half that peak, with eviction and rematerialization on (if half does not fit,
the next fraction in --fractions, and it says so), and once more with its reserved bytes
(what the allocator holds from the system) also capped, at --reserved-limit times the
budget (option reserved_limit; compaction moves blocks to keep under it). Prints the peaks,
the median step times, the evictions and remats, the policy `auto` chose, and whether losses
and final parameters match bit for bit.

    /usr/bin/python3 tools/torch_demo.py [--fractions 0.5,0.6,0.7] [--reserved-limit 1.15]
        [--steps 4] [script args...]
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
    parser.add_argument("--reserved-limit", type=float, default=1.15,
                        help="the third run's reserved limit, times the budget (0: no third run)")
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

    runs_shown = [("no budget", free), (f"budget {fraction}x", under)]
    if args.reserved_limit > 0:
        limit = int(budget * args.reserved_limit)
        print(f"== the same budget, reserved bytes capped at {mib(limit)} "
              f"({args.reserved_limit}x the budget)")
        capped = runs.run(args.script, script_args, conf=f"budget:{budget},reserved_limit:{limit}")
        if capped.returncode == 0:
            runs_shown.append((f"+ reserved {args.reserved_limit}x", capped))
        else:
            errors = [l for l in capped.stderr.splitlines() if "OutOfMemoryError" in l] or ["?"]
            print(f"   does not fit: {errors[-1][:220]}")

    def row(name, value):
        return (name, *(value(r) for _, r in runs_shown))

    rows = [("", *(label for label, _ in runs_shown)),
            row("peak live tensor bytes", lambda r: mib(r.peak_bytes)),
            # what the caching allocator held, cached free segments included: the budget
            # caps live bytes only (option reserved_limit caps this; docs/pytorch.md)
            row("peak reserved bytes", lambda r: mib(r.report["reserved_bytes.all.peak"])),
            row("peak RSS of the process", lambda r: mib(r.max_rss_kib * 1024)),
            # the first step also builds the model's caches: the median of the others
            row("median step time", lambda r: f"{runs.median(r.step_times()[1:]):.3f} s"),
            row("evictions / remats", lambda r: f"{r.report['dtr.num_evictions']} / "
                                                f"{r.report['dtr.num_remats']}"),
            row("blocks moved", lambda r: str(r.report.get("dtr.num_block_moves", 0)))]
    for cells in rows:
        print(f"  {cells[0]:24s}" + "".join(f" {c:>17s}" for c in cells[1:]))
    for label, r in runs_shown[1:]:  # what `auto` chose (Note [Trial by replay])
        print(f"  policy ({label}): {r.report.get('dtr.policy', '?')}")
    same = all(r.state() == free.state() for _, r in runs_shown) and free.losses()
    for label, r in runs_shown[1:]:
        print(f"  losses {' '.join(free.losses())} vs {' '.join(r.losses())} ({label})")
    print(f"  losses and final parameters bit-identical: {'yes' if same else 'NO'}")
    if not same or any(r.peak_bytes > budget for _, r in runs_shown[1:]):
        sys.exit(1)


if __name__ == "__main__":
    main()
