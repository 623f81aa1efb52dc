"""`make eval` / `make eval-quick`: DTR's headline figure on real models, live and simulated.

For each model (an unmodified training script in tests/torch/scripts/) this measures:
  1. the plain run (no library): step time, and the losses/parameters every budgeted run
     must reproduce bit for bit;
  2. the baseline peak: the library with `remat:False` (allocator only, no budget);
  3. a trace of one unbudgeted run (DTR_TRACE), replayed in dtr-sim at the same budget
     fractions under every policy, and planned by dtr-plan (best static plan);
  4. live runs under budget = fraction x baseline peak, from 0.9 down, per policy, until a
     budget fails (the lowest feasible fraction is the last one that ran). Each runs with
     `on_thrash:raise`: a run whose remats pass max_overhead (2x the program's own ops) stops
     with status `thrash` rather than running on; and one still going after 20 times the
     allocator-only run's time (at least 2 minutes) is killed, status `timeout`: lru on
     densenet121 at 0.5 once sat over 16 minutes in one backward pass (2026-11-29), where
     the raise could not reach then; it now stops that cascade too (Note [Thrashing within
     one op] in integration/torch/lineage.cpp), and the timeout is a backstop.
It writes docs/results.md (tables), docs/results/results.csv (every row) and
docs/results/overhead.svg (overhead against budget per model: live and simulated panels
side by side, one line per policy), drawn by `dtr-sim plot`.

    /usr/bin/python3 tools/eval.py [--quick] [--out docs]

Note [Same budget in bytes]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
The simulator replays each trace at the live run's budget in bytes, not at the same
fraction of its own baseline peak: the trace's baseline (every storage freed at its last
release, no memory outside the engine) is not the live allocator-only peak, and a fraction
of one is not a fraction of the other. The live budget caps allocated bytes only, so the
replays count bytes (`--allocator none`); coop, which needs the caching allocator's
addresses, replays through it on a device with no size (`--allocator host`, Note [Host
device] in sim/replay.cpp), not on one of the budget's size, where fragmentation ran it
out of memory at budgets the live runs trained at (until 2026-12-05). The static plans
are the exception: dtr-plan takes fractions of its graph's peak, so "best static" is at
the same fraction of the trace's peak.

Note [Which overhead]
~~~~~~~~~~~~~~~~~~~~~
Several numbers per run, not one. The *live step-time ratios* are what a user pays: median
step time under the budget over the allocator-only run's (`remat:False`: the same caching
allocator, no lineage) and over plain PyTorch's. They include the library's per-op
bookkeeping and eviction searches. Against plain PyTorch they also include what the caching
allocator saves: PyTorch's default CPU allocator returns every large tensor to the system
and faults it in again, so the ratio can be below 1. The *live compute overhead* is 1 +
remat compute / model compute as the library timed them (DTR's definition), and the
*simulated overhead* is the same quantity predicted by dtr-sim from the trace. Only the
last two are comparable; the gap between them and the first is the runtime's own cost.
"""
import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from dtr import runs  # noqa: E402

SCRIPTS = ROOT / "tests" / "torch" / "scripts"
# name -> (script, args). Sizes fit a 2-core CPU machine: a step takes well under a second.
MODELS = {
    "resnet18": ("vision.py", ["--model", "resnet18", "--size", "64", "--batch", "16"]),
    "resnet50": ("vision.py", ["--model", "resnet50", "--size", "64", "--batch", "8"]),
    "densenet121": ("vision.py", ["--model", "densenet121", "--size", "64", "--batch", "8"]),
    "mobilenet_v2": ("vision.py", ["--model", "mobilenet_v2", "--size", "64", "--batch", "16"]),
    "transformer": ("transformer.py", []),
    "lstm": ("lstm_lm.py", []),
}
POLICIES = ["dtr_eq", "dtr", "msps", "coop", "lru"]
# dtr-plan's methods that finish on these traces. checkmate and checkmate-lp are left out:
# on a resnet18 trace (1.7k events) neither returned within 60 s despite --time-limit 10.
REFERENCE_RUNS = 3
STATIC_METHODS = ["chen", "revolve", "rotor", "checkpoint-subset", "kusumoto", "kusumoto-approx",
                  "kusumoto-mem", "kusumoto-approx-mem"]
FULL = dict(models=list(MODELS), policies=POLICIES, steps=4,
            fractions=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
QUICK = dict(models=["resnet18", "lstm"], policies=["dtr_eq", "lru"], steps=3,
             fractions=[0.9, 0.7, 0.5])


class Progress:
    """One status line on stderr: done/total, the current job, and an ETA from the mean job
    time so far (jobs skipped after a failed budget shrink the total)."""

    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()

    def show(self, label):
        width = 30
        filled = width * self.done // max(self.total, 1)
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                         f"elapsed {elapsed / 60:4.1f} min, eta {eta / 60:4.1f} min  {label:<40}")
        sys.stderr.flush()

    def step(self, label, skipped=0):
        self.done += 1
        self.total -= skipped
        self.show(label)

    def close(self):
        sys.stderr.write("\n")


def step_time(run):
    """Median step time without the first step (allocator and oneDNN warm-up)."""
    times = run.step_times()
    return runs.median(times[1:] if len(times) > 1 else times)


def simulate(sim, trace, policies, budgets, conf=""):
    """dtr-sim's replay of the trace per (policy, budget bytes): the live run's own budgets,
    in bytes (Note [Same budget in bytes]; runs.simulate), with DTR_CONF `conf`."""
    out = {}
    for policy in policies:
        for fraction, budget in budgets:
            result = runs.simulate(sim, trace, policy, budget, conf=conf)
            if result is not None:
                out[(policy, fraction)] = result
    return out


def bounds(sim, trace, budgets):
    """Per fraction, the least overhead any schedule pays at the live run's budget in bytes
    (`dtr-sim bound`: Note [Remat bound] in sim/remat_bound.cpp), or "none fits"."""
    proc = subprocess.run([str(sim), "bound", "--trace", str(trace), "--json", "--budget",
                           ",".join(str(b) for _, b in budgets)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"eval: dtr-sim bound failed on {trace}: {proc.stderr.strip()}")
    out = {}
    for (fraction, _), line in zip(budgets, proc.stdout.splitlines()):
        j = json.loads(line)
        out[fraction] = j["overhead"] if j["feasible"] else None
    return out


def best_static(plan, trace, fractions, out_csv, time_limit):
    """Per fraction, the best feasible static plan's (method, overhead), or {} if dtr-plan
    cannot plan this trace (it says why on stderr, kept in the returned note)."""
    proc = subprocess.run([str(plan), "--time-limit", str(time_limit), "compare", "--trace",
                           str(trace), "--budgets", ",".join(map(str, fractions)),
                           "--methods", ",".join(STATIC_METHODS), "--policies", "dtr_eq",
                           "--csv", str(out_csv)], capture_output=True, text=True)
    if proc.returncode != 0 or not out_csv.exists():
        return {}, proc.stderr.strip().splitlines()[-1:] or ["dtr-plan failed"]
    best = {}
    with open(out_csv) as f:
        for r in csv.DictReader(f):
            if r.get("kind") != "static" or r.get("status") != "ok":
                continue
            key = round(float(r["budget_ratio"]), 4)
            value = float(r["overhead"])
            if key not in best or value < best[key][1]:
                best[key] = (r["method"], value)
    return best, []


# A budgeted run is stopped after the larger of these: TIMEOUT_RATIO times the slowest
# allocator-only run's wall time, or TIMEOUT_MIN_S seconds (status `timeout`).
TIMEOUT_RATIO = 20
TIMEOUT_MIN_S = 120


def live_status(run):
    """`ok`, `thrash` (on_thrash:raise fired), `timeout`, `oom` or `failed`."""
    if run.timed_out:
        return "timeout"
    if run.returncode == 0:
        return "ok"
    if "dtr: thrashing" in run.stderr:
        return "thrash"
    return "oom" if "out of memory" in run.stderr else "failed"


def evaluate(name, config, tools, tmp, progress):
    script, args = MODELS[name]
    args = [*args, "--steps", str(config["steps"])]
    path = SCRIPTS / script
    # The two references are run REFERENCE_RUNS times, interleaved, and their step times
    # taken as the median over runs: one run's steps vary by tens of percent here.
    plains, bases = [], []
    for _ in range(REFERENCE_RUNS):
        plains.append(runs.run(path, args, library=False))
        bases.append(runs.run(path, args, conf="remat:False"))
        if plains[-1].returncode or bases[-1].returncode:
            runs.fail(f"{name}: the plain or the allocator-only run failed",
                      plains[-1] if plains[-1].returncode else bases[-1])
    plain, base = plains[0], bases[0]
    progress.step(f"{name}: plain and allocator-only runs")
    trace = Path(tmp) / f"{name}.trace"
    traced = runs.run(path, args, conf=f"trace:{trace}")
    progress.step(f"{name}: trace")
    if base.returncode or traced.returncode or not trace.exists():
        runs.fail(f"{name}: the baseline or the traced run failed", traced)
    fractions, policies = config["fractions"], config["policies"]
    peak = base.peak_bytes
    # A budgeted run still going after this long is stopped. on_thrash:raise now stops a
    # cascade within one op too (Note [Thrashing within one op] in
    # integration/torch/lineage.cpp); this is the backstop for a run slow in some other way.
    timeout = max(TIMEOUT_MIN_S, TIMEOUT_RATIO * max(r.wall_s for r in bases))
    plain_step = runs.median([step_time(r) for r in plains])
    base_step = runs.median([step_time(r) for r in bases])
    sim = simulate(tools["sim"], trace, policies, [(f, int(peak * f)) for f in fractions],
                   config["sim_conf"])
    bound = bounds(tools["sim"], trace, [(f, int(peak * f)) for f in fractions])
    static, static_note = best_static(tools["plan"], trace, fractions,
                                      Path(tmp) / f"{name}-plan.csv", config["time_limit"])
    progress.step(f"{name}: simulated")
    rows = []
    for policy in policies:
        for i, fraction in enumerate(fractions):
            run = runs.run(path, args, conf=f"budget:{int(peak * fraction)},policy:{policy},"
                           "on_thrash:raise", timeout=timeout)
            s = sim.get((policy, fraction), {})
            row = dict(model=name, policy=policy, budget=fraction,
                       budget_bytes=int(peak * fraction), status=live_status(run),
                       sim_overhead=float(s["overhead"]) if s.get("status") == "ok" else None,
                       sim_status=s.get("status", "-"),
                       sim_peak=int(s["peak_bytes"]) if s else None,
                       sim_baseline_peak=s.get("baseline_peak_bytes"),
                       bound=bound.get(fraction),
                       static=static.get(round(fraction, 4)))
            if run.returncode == 0:
                r = run.report
                if "dtr.remat_compute_ns" not in r:
                    # The library was not loaded, or did not report (rebuilt during the run?)
                    runs.fail(f"{name} {policy} @ {fraction}: the run printed no dtr report "
                              "(DTR_REPORT); is build/lib/libdtr_torch.so being rebuilt?", run)
                row.update(step_ratio=step_time(run) / plain_step,
                           alloc_ratio=step_time(run) / base_step,
                           live_overhead=1 + r["dtr.remat_compute_ns"] / r["dtr.model_compute_ns"],
                           live_peak=r["allocated_bytes.all.peak"],
                           evictions=r["dtr.num_evictions"], remats=r["dtr.num_remats"],
                           identical=run.state() == plain.state())
            rows.append(row)
            skipped = len(fractions) - i - 1 if run.returncode else 0
            progress.step(f"{name}: {policy} @ {fraction}", skipped)
            if run.returncode:
                break  # lower budgets fail too: this one's working set no longer fits
    return dict(name=name, args=" ".join(args), script=script, peak=peak,
                plain_step=plain_step, base_step=base_step, base_rss=base.max_rss_kib, plain_rss=plain.max_rss_kib,
                trace_ops=traced.report.get("dtr.num_ops"), rows=rows, static_note=static_note)


def fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def mib(value):
    return fmt(None if value is None else value / 2**20, ".1f")


def lowest(rows, policy):
    ok = [r["budget"] for r in rows if r["policy"] == policy and r["status"] == "ok"]
    return min(ok) if ok else None


def sim_live_gap(rows):
    """Mean and max |simulated - live compute overhead| over the runs where both finished."""
    gaps = [abs(r["sim_overhead"] - r["live_overhead"]) for r in rows
            if r["status"] == "ok" and r["sim_overhead"] is not None]
    return (sum(gaps) / len(gaps), max(gaps), len(gaps)) if gaps else (None, None, 0)


def write_csv(path, models):
    keys = ["model", "policy", "budget", "budget_bytes", "status", "step_ratio", "alloc_ratio",
            "live_overhead",
            "sim_overhead", "sim_status", "bound", "static_method", "static_overhead", "live_peak",
            "sim_peak", "evictions", "remats", "identical"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        for m in models:
            for r in m["rows"]:
                static = r.get("static") or (None, None)
                w.writerow({**r, "static_method": static[0], "static_overhead": static[1]})


def write_plot(sim, path, models, tmp):
    """Overhead against budget: per model a live step-time, a live overhead and a simulated
    overhead panel, one line per policy (same colour in every panel)."""
    points = Path(tmp) / "plot.csv"
    with open(points, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["panel", "series", "x", "y"])
        for m in models:
            for r in m["rows"]:
                for panel, key in (("live step time / allocator only", "alloc_ratio"),
                                   ("live compute overhead", "live_overhead"),
                                   ("simulated overhead", "sim_overhead")):
                    value = r.get(key)
                    w.writerow([f"{m['name']}: {panel}", r["policy"], r["budget"],
                                "nan" if value is None else f"{value:.4f}"])
    subprocess.run([str(sim), "plot", "--csv", str(points), "--svg", str(path), "--columns", "3",
                    "--x-label", "budget (fraction of the baseline peak)",
                    "--y-label", "x the plain run", "--title",
                    "dtr on CPU: overhead against budget (live and simulated)"], check=True)


def headline(models, config):
    lines = []
    for m in models:
        best = lowest(m["rows"], "dtr_eq")
        at = [r for r in m["rows"] if r["policy"] == "dtr_eq" and r["budget"] == best]
        gap = sim_live_gap(m["rows"])
        ident = all(r.get("identical", True) for r in m["rows"])
        lines.append(
            f"- **{m['name']}**: dtr_eq trains down to {fmt(best, '.1f')}x of its "
            f"{mib(m['peak'])} MiB peak"
            + (f" at {at[0]['alloc_ratio']:.2f}x the step time of the allocator alone "
               f"({at[0]['step_ratio']:.2f}x plain PyTorch's)" if at else "")
            + f"; simulator vs live overhead differ by {fmt(gap[0], '.2f')} on average; "
            + ("every budgeted run bit-identical to the plain run." if ident
               else "**some runs were not bit-identical** (see the table).")
        )
    return lines


def write_markdown(path, models, config, minutes, command):
    out = ["# Results: dtr on real models, live and simulated", "",
           f"Generated by `{command}` on this machine (2 cores, no GPU, PyTorch 1.13.1 on CPU "
           f"with OpenBLAS) in {minutes:.0f} minutes; do not edit by hand. Each budgeted "
           "configuration ran once (median step time over the steps after the first), with "
           "`on_thrash:raise`: status `thrash` is a run stopped once its remats passed "
           "`max_overhead` (twice its own ops), `timeout` one killed after 20 times the "
           "allocator-only run's time (at least 2 minutes); both count as infeasible, like "
           "`oom`. The plain "
           "and allocator-only references ran 3 times each, interleaved (median). Step times "
           "on this shared 2-core machine vary by tens of percent between runs, so single "
           "step-time ratios are rough; the compute overheads are not affected."
           + (f" The replays ran with `DTR_CONF={config['sim_conf']}`." if config["sim_conf"]
              else "")
           + f" A replay stops with status `thrash` past a compute overhead of "
             f"{runs.MAX_REPLAY_OVERHEAD}.", "",
           "## Headline", "", *headline(models, config), "",
           "## Models", "",
           "| model | script | baseline peak | plain step | allocator-only step | trace ops | "
           "lowest feasible budget per policy | mean / max sim-live gap |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in models:
        low = ", ".join(f"{p} {fmt(lowest(m['rows'], p), '.1f')}" for p in config["policies"])
        gap = sim_live_gap(m["rows"])
        out.append(f"| {m['name']} | `{m['script']} {m['args']}` | {mib(m['peak'])} MiB | "
                   f"{m['plain_step']:.3f} s | {m['base_step']:.3f} s | {m['trace_ops']} | {low} | "
                   f"{fmt(gap[0], '.3f')} / {fmt(gap[1], '.3f')} ({gap[2]} runs) |")
    out += ["", "![overhead against budget](results/overhead.svg)", "",
            "Columns below: *vs alloc* = median step time under the budget / the allocator-only "
            "run's (the library with `remat:False`: what DTR itself costs); *vs plain* = the same "
            "over plain PyTorch's, whose CPU allocator maps and unmaps every large tensor, so "
            "the caching allocator alone can make a step faster than plain (ratios below 1); "
            "*live overhead* = 1 + remat compute / model compute as the library timed them; "
            "*sim overhead* = the same predicted by `dtr-sim` from the run's trace at the same "
            "budget in bytes (byte accounting; coop through the caching allocator on a device "
            "with no size, as the host runs, `--allocator host`: Note [Same budget in bytes] "
            "in tools/eval.py); *bound* = the least overhead any schedule "
            "pays on that trace at that budget, static or dynamic (`dtr-sim bound`: Note "
            "[Remat bound] in sim/remat_bound.cpp; `none fits` where no schedule runs); "
            "*sim peak* is the replay's; *best static* = the best feasible plan of "
            "`dtr-plan compare` on that trace (method and overhead); *same* = losses, "
            "parameters and buffers bit-identical to the plain run. Note [Which overhead] in "
            "tools/eval.py says why there are several numbers.", ""]
    for m in models:
        out += [f"### {m['name']}", ""]
        if m["static_note"]:
            out += [f"dtr-plan could not plan this trace: {m['static_note'][0]}", ""]
        elif not any(r.get("static") for r in m["rows"]):
            out += [NO_STATIC, ""]
        out += ["| budget | policy | status | vs alloc | vs plain | live overhead | sim overhead | "
                "bound | best static | live peak MiB | sim peak MiB | evictions | remats | same |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in sorted(m["rows"], key=lambda r: (-r["budget"], r["policy"])):
            static = r.get("static")
            out.append(
                f"| {r['budget']:.1f} | {r['policy']} | {r['status']} | "
                f"{fmt(r.get('alloc_ratio'), '.3f')} | {fmt(r.get('step_ratio'), '.3f')} | "
                f"{fmt(r.get('live_overhead'), '.3f')} | "
                f"{fmt(r['sim_overhead'], '.3f', r['sim_status'])} | "
                f"{fmt(r.get('bound'), '.3f', 'none fits')} | "
                f"{f'{static[0]} {static[1]:.3f}' if static else '-'} | "
                f"{mib(r.get('live_peak'))} | {mib(r['sim_peak'])} | {r.get('evictions', '-')} | "
                f"{r.get('remats', '-')} | {'yes' if r.get('identical') else ('-' if r['status'] != 'ok' else '**no**')} |")
        out.append("")
    out += ["## Why the simulator and the live runs differ", "", WHY, ""]
    Path(path).write_text("\n".join(out))


NO_STATIC = ("No `dtr-plan` method found a static plan within any of these budgets on this "
             "trace, so *best static* is empty (docs/planner.md, \"Budget and baseline\" and "
             "\"Traces recorded from PyTorch\": why a static plan of a PyTorch trace may not "
             "fit where a dynamic policy does).")

WHY = """\
- **What the engine sees.** The trace holds only what the engine recorded. A recorded op's
  scratch (a convolution's columns, oneDNN's reorders) is in it, as the op's `WORKSPACE`,
  and the replay holds it while the op runs (docs/pytorch.md, "Op workspaces"); memory
  outside recorded ops (unrecorded ops, tensors made with recording off) is in the live
  allocator's count and not in the replay's, so at the same budget in bytes the replay
  has more room for activations; ops the runtime never records (opaque ops) are not
  replayed. Both push the simulated overhead below the live one.
- **When memory comes back.** Live, a dead storage is freed when the lineage collector
  finds it (a scan every 64 ops, and before every eviction); a pinned one (a gradient at
  the optimizer step) only when a full collect discards it. The trace (format v2) records
  both at those moments (RELEASE, DISCARD), but the replay does not collect before an
  eviction as the live run does, so it may evict where the live run freed a dead storage.
- **Choices diverge.** Eviction choices depend on staleness and costs measured on each
  side's own clock; one different choice changes every later one.
- **Op costs.** The simulator charges each op the time it took in the traced run; a live
  remat is timed when it runs, with other caches and thread contention, and op times on a
  shared 2-core machine vary by tens of percent from run to run.
- **What the live step time adds.** The step-time ratios also pay the per-op bookkeeping
  (about 8 us per op, docs/pytorch.md) and the eviction searches, which neither overhead
  counts."""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 models, 2 policies, 3 budgets")
    parser.add_argument("--out", help="where results.md goes (default: docs/, and "
                        "build/eval-quick/ with --quick, which must not replace the full results)")
    parser.add_argument("--models", help="comma list (default: all, or the quick set)")
    parser.add_argument("--policies", help="comma list (default: dtr_eq,dtr,msps,coop,lru)")
    parser.add_argument("--fractions", help="comma list of budget fractions, highest first")
    parser.add_argument("--steps", type=int, help="training steps per run")
    parser.add_argument("--time-limit", type=float, default=20,
                        help="dtr-plan's solver limit per method and budget, seconds")
    parser.add_argument("--bin", default=str(ROOT / "build" / "bin"))
    parser.add_argument("--sim-conf", default=runs.HOST_MODEL,
                        help="DTR_CONF for dtr-sim's replays (default %(default)s: the live "
                        "host's late-found deaths, Note [Dead storages in the replay] in "
                        "bench/torch_sim_vs_live.py); '' replays as DTR's simulator does")
    args = parser.parse_args()
    config = dict(QUICK if args.quick else FULL, time_limit=args.time_limit,
                  sim_conf=args.sim_conf)
    if args.models:
        config["models"] = args.models.split(",")
    if args.policies:
        config["policies"] = args.policies.split(",")
    if args.fractions:
        config["fractions"] = sorted(map(float, args.fractions.split(",")), reverse=True)
    if args.steps:
        config["steps"] = args.steps
    unknown = [m for m in config["models"] if m not in MODELS]
    if unknown:
        sys.exit(f"eval: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    tools = {"sim": Path(args.bin) / "dtr-sim", "plan": Path(args.bin) / "dtr-plan"}
    if not runs.library_path().exists():
        sys.exit(f"eval: {runs.library_path()} is missing; run `make build` first")
    out = Path(args.out or (ROOT / "build" / "eval-quick" if args.quick else ROOT / "docs"))
    (out / "results").mkdir(parents=True, exist_ok=True)
    per_model = 3 + len(config["policies"]) * len(config["fractions"])
    progress = Progress(per_model * len(config["models"]))
    start = time.monotonic()
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in config["models"]:
            models.append(evaluate(name, config, tools, tmp, progress))
        progress.close()
        write_csv(out / "results" / "results.csv", models)
        write_plot(tools["sim"], out / "results" / "overhead.svg", models, tmp)
    command = "make eval-quick" if args.quick else "make eval"
    if args.sim_conf != runs.HOST_MODEL:
        command = (f"tools/eval.py{' --quick' if args.quick else ''} "
                   f"--sim-conf '{args.sim_conf}'")
    write_markdown(out / "results.md", models, config, (time.monotonic() - start) / 60, command)
    print("\n".join(headline(models, config)))
    print(f"wrote {out / 'results.md'}, {out / 'results' / 'results.csv'} and "
          f"{out / 'results' / 'overhead.svg'}")


if __name__ == "__main__":
    main()
