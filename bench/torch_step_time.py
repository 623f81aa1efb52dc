"""Step time of unmodified training scripts with libdtr_torch.so against without it,
measured side by side: the configurations are interleaved round by round, so drift in
the machine's speed hits all of them alike. Reported as ratios of medians (issue #4):

    /usr/bin/python3 bench/torch_step_time.py [--rounds 5] [--steps 10] [--out docs/...]

For each script (resnet18, transformer, transformer6 = 6 layers): `plain` (no library),
`dtr` (library, no budget: recording and bookkeeping only), `dtr 0.5x` (a hard budget of
half the peak, evicting and rematerializing; where half is infeasible, the next fraction in
--fractions; with --policies, one such configuration per eviction policy, and with --confs
one per DTR_CONF fragment, such as `--confs "op_cost:median;op_cost:measured"`; with
--against, each budget configuration again under another build of the library, so that a
change is timed side by side with the library before it). Each run's
first step is dropped (warm-up); a configuration's figure is the median over rounds of the
run's median step time; the mean-step ratio divides the medians over rounds of each run's
mean step after the first (the whole run, a policy trial's steps included) likewise. Peak
RSS is each process's own (wait4), the median over rounds;
remat time is the library's measured wall time of a run's remats (dtr.remat_measured_ns),
the median over rounds; remats/run is the last round's count.

Note [Steps a run]
~~~~~~~~~~~~~~~~~~
The default policy, `auto`, spends a run's first steps on its trial: a warm-up step, then
one step under each of its four candidates (Note [Policy trial] in
eviction/heuristics/auto_heuristic.cpp). A budget run's median step is the policy's steady
state only where most of the steps after the first run under its choice: with 10 steps, 5
of the 9 timed are the choice's and a sixth is its trial step. With 6 (the figures in
docs/pytorch.md up to 2026-12-06), 4 of the 5 timed steps are now the trial's, so the median
could be a candidate the trial rejected. Hence 10 by default (4 before).

Note [Threads on this machine]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every run gets OMP_NUM_THREADS=--threads (2 by default, as the figures in docs/pytorch.md).
Left unset, Debian's torch runs 1 intra-op thread on this 2-vCPU VM, and for small ops
that is much faster: the chunked LSTM LM's plain steps took 0.66-0.90 s unset or with 1
thread against 1.41-2.11 s with 2 (by hand, 2026-11-26). So compare only figures taken
with the same --threads. OMP_WAIT_POLICY matters as much: passed through from the
environment, and with PASSIVE the plain 3-layer transformer's step was about half the
default's on this machine (docs/pytorch.md, "OpenMP's wait policy"); compare only figures
taken under the same policy.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

# name: (script, its arguments besides --steps)
SCRIPTS = {
    # resnet18 by default, 128x128, batch 32
    "resnet18": (ROOT / "tests/torch/scripts/vision.py", ["--batch", "32"]),
    "transformer": (ROOT / "tests/torch/scripts/transformer.py", []),  # 3 layers
    "transformer6": (ROOT / "tests/torch/scripts/transformer.py", ["--layers", "6"]),
    # the LSTM LM of test_remat.py at 0.5x: nn.LSTM per 16-step window; needs --policies msps
    "lstm_chunked": (ROOT / "tests/torch/scripts/lstm_lm.py",
                     ["--vocab", "1000", "--seq", "128", "--chunks", "8"]),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    # Note [Steps a run]
    parser.add_argument("--steps", type=int, default=10,
                        help="training steps a run; the first is dropped, and the figure is the "
                             "median of the rest")
    parser.add_argument("--fractions", default="0.5,0.6,0.7",
                        help="budget fractions of the peak to try in order: the first under "
                             "which the script runs is timed (said in the table)")
    parser.add_argument("--policies", default="",
                        help="comma-separated eviction policies to time under the budget, each "
                             "a configuration of its own (default: the library's default)")
    parser.add_argument("--confs", default="",
                        help="';'-separated DTR_CONF fragments (such as op_cost:measured) to "
                             "time under the budget, each a configuration of its own, for each "
                             "policy")
    parser.add_argument("--against", default="",
                        help="path of another build of libdtr_torch.so (the library before a "
                             "change): each budget configuration is timed under it too, "
                             "interleaved, as a row marked 'against'")
    parser.add_argument("--threads", type=int, default=2,
                        help="OMP_NUM_THREADS of every run (Note [Threads on this machine])")
    parser.add_argument("--scripts", default="resnet18,transformer",
                        help="comma-separated, of " + ", ".join(SCRIPTS))
    args = parser.parse_args()
    policies = args.policies.split(",") if args.policies else [""]
    confs = args.confs.split(";") if args.confs else [""]
    # (policy, fragment) pairs; "" is the library's default
    variants = [(p, c) for p in policies for c in confs]

    def budget_conf(budget, variant):
        policy, fragment = variant
        return (f"budget:{budget}" + (f",policy:{policy}" if policy else "") +
                (f",{fragment}" if fragment else ""))

    def label(variant):
        return " ".join(v for v in variant if v)

    rows = []
    for name in args.scripts.split(","):
        script, extra = SCRIPTS[name]
        script_args = ["--steps", str(args.steps), *extra]
        free = runs.run(script, script_args, conf="remat:False", threads=args.threads)
        if free.returncode != 0:
            runs.fail(f"{name} failed", free)
        for fraction in map(float, args.fractions.split(",")):
            budget = int(free.peak_bytes * fraction)
            probe = budget_conf(budget, variants[0])  # the first variant
            if runs.run(script, script_args, conf=probe, threads=args.threads).returncode == 0:
                break
            print(f"{name}: infeasible at {fraction}x of its peak", flush=True)
        else:
            runs.fail(f"{name}: no budget in {args.fractions} is feasible")
        configs = {
            "plain": dict(library=False),
            "dtr": dict(conf=None),
        }
        policy_of = {}  # budget configuration -> its variant's label ("": the default)
        for variant in variants:
            config = f"dtr {fraction}x{' ' + label(variant) if label(variant) else ''}"
            configs[config] = dict(conf=budget_conf(budget, variant))
            policy_of[config] = label(variant)
            if args.against:
                configs[config + " against"] = dict(conf=budget_conf(budget, variant),
                                                    library=args.against)
                policy_of[config + " against"] = " ".join(filter(None, (label(variant),
                                                                         "against")))
        times = {c: [] for c in configs}
        rss = {c: [] for c in configs}
        remats = {c: 0 for c in configs}
        remat_s = {c: [] for c in configs}  # measured remat wall time per run
        means = {c: [] for c in configs}  # each run's mean step after the first
        for r in range(args.rounds):
            for config, kw in configs.items():
                run = runs.run(script, script_args, threads=args.threads, **kw)
                if run.returncode != 0:
                    runs.fail(f"{name} {config} failed", run)
                times[config].append(runs.median(run.step_times()[1:]))
                means[config].append(sum(run.step_times()[1:]) / len(run.step_times()[1:]))
                rss[config].append(run.max_rss_kib / 1024)
                remats[config] = run.report.get("dtr.num_remats", 0)
                remat_s[config].append(run.report.get("dtr.remat_measured_ns", 0) / 1e9)
            print(f"{name} round {r + 1}/{args.rounds}: " +
                  ", ".join(f"{c} {t[-1]:.3f} s" for c, t in times.items()), flush=True)
        med = {c: runs.median(t) for c, t in times.items()}
        rows.append((name, med, budget, remats, {c: runs.median(v) for c, v in rss.items()},
                     fraction, policy_of, {c: runs.median(v) for c, v in remat_s.items()},
                     {c: runs.median(v) for c, v in means.items()}))
    print()
    print("| model | plain step | dtr, no budget | ratio | dtr, budget | ratio | mean-step ratio |"
          " remats/run | remat time/run | peak RSS plain / dtr / dtr budget |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, med, budget, remats, rss, fraction, policy_of, remat_s, mean in rows:
        plain = med["plain"]
        keys = list(med)
        for key in keys[2:]:  # one row per budget configuration (policy)
            policy = policy_of[key]
            print(f"| {name} | {plain:.3f} s | {med[keys[1]]:.3f} s | {med[keys[1]] / plain:.3f} | "
                  f"{med[key]:.3f} s ({fraction}x: {budget / 2**20:.0f} MiB"
                  f"{', ' + policy if policy else ''}) | {med[key] / plain:.3f} | "
                  f"{mean[key] / mean['plain']:.3f} | "
                  f"{remats[key]} | {remat_s[key]:.3f} s | {' / '.join(f'{rss[k]:.0f} MiB' for k in keys[:2] + [key])} |")


if __name__ == "__main__":
    main()
