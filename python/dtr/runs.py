"""Running an unmodified training script with and without dtr, and reading what it did.

Used by `make demo` (tools/torch_demo.py) and the step-time benchmark
(bench/torch_step_time.py). A run is `/usr/bin/python3 script args...` in a fresh process:
without the library, or with libdtr_torch.so preloaded and a DTR_CONF, with DTR_REPORT=1
so the library prints its summary at exit. The script's own output lines are kept:
`loss <step> <float32 bits> <value>`, `time <step> <seconds>`, `param ...`, `buffer ...`.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    returncode: int
    wall_s: float
    lines: list = field(default_factory=list)  # the script's stdout lines
    report: dict = field(default_factory=dict)  # the library's summary, {} without it
    stderr: str = ""
    max_rss_kib: int = 0  # the process's peak resident set (getrusage of the child)
    timed_out: bool = False  # killed at run()'s timeout

    def losses(self):
        return [l.split()[2] for l in self.lines if l.startswith("loss ")]

    def state(self):
        """Loss bit patterns and parameter/buffer digests: what must match bit for bit."""
        return [l for l in self.lines if l.startswith(("loss ", "param ", "buffer "))]

    def step_times(self):
        return [float(l.split()[2]) for l in self.lines if l.startswith("time ")]

    @property
    def peak_bytes(self):
        return self.report.get("allocated_bytes.all.peak")


# dtr-sim's DTR_CONF for replays of a PyTorch trace that model the live host: its
# late-found deaths (Note [Dead storages in the replay] in bench/torch_sim_vs_live.py) and
# its own defaults (DTR_PYTORCH_DEFAULTS in include/dtr/core/options.h).
HOST_MODEL = "lazy_release:True,dead_first:True,dead_lineage_factor:30"


def library_path():
    return Path(os.environ.get("DTR_LIBRARY", ROOT / "build" / "lib" / "libdtr_torch.so"))


def run(script, args=(), conf=None, library=True, threads=2, python="/usr/bin/python3",
        extra_env=None, timeout=None):
    """Runs `script` once. conf=None with library=True: the library with its defaults;
    `library` may also be the path of another build of it.
    With `timeout` (seconds of wall time) a run still going then is killed (SIGKILL), and
    its returncode is -9 with `timed_out` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTR_") and k != "LD_PRELOAD"}
    env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    if library:
        env["LD_PRELOAD"] = str(library_path() if library is True else library)
        env["DTR_REPORT"] = "1"
        if conf:
            env["DTR_CONF"] = conf
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([python, str(script), *map(str, args)], env=env,
                                stdout=out, stderr=err, text=True)
        timed_out = False
        while True:
            flags = 0 if timeout is None or timed_out else os.WNOHANG
            pid, status, usage = os.wait4(proc.pid, flags)  # this child's own rusage
            if pid:
                break
            if time.perf_counter() - start > timeout:
                proc.kill()
                timed_out = True
            else:
                time.sleep(0.05)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    report = {}
    for line in stderr.splitlines():
        if line.startswith("dtr: report "):
            report = json.loads(line[len("dtr: report "):])
    return Run(proc.returncode, wall, stdout.splitlines(), report, stderr, usage.ru_maxrss,
               timed_out)


# A replay past this compute overhead stops with status `thrash`. Without a limit, a
# replay of a densenet121 trace at 0.3 of its peak (msps, lazy_release:True and
# dead_first:True) thrashed until out of memory at overhead 501, after 57 s, and another
# ran for more than 14 minutes, which held up `make eval` (2026-12-05).
MAX_REPLAY_OVERHEAD = 20


def simulate(sim, trace, policy, budget_bytes, conf="", reserved_limit=None):
    """dtr-sim's replay of `trace` under `policy` at a live run's budget in bytes: byte
    accounting (`--allocator none`), like the live budget, which caps allocated bytes only
    (tools/eval.py: Note [Same budget in bytes]); coop scores address windows and needs the
    caching allocator, so it replays through it over a device with no size, as the live
    host's budget caps allocated bytes only (`--allocator host`: Note [Host device] in
    sim/replay.cpp; a device of the budget's size ran out of memory where the live runs
    trained), as does a replay under a live run's `reserved_limit` (bytes, the device's
    size then; docs/simulator.md, "Reserved limit and compaction"). `conf`: a
    DTR_CONF for dtr-sim (other options, such as lazy_release:True or compact:False).
    A replay past MAX_REPLAY_OVERHEAD stops as `thrash`.
    dtr-sim's --json result, or None if it failed."""
    memory = "host" if policy == "coop" or reserved_limit else "none"
    env = dict(os.environ, DTR_CONF=conf) if conf else None
    limit = ["--reserved-limit", str(int(reserved_limit))] if reserved_limit else []
    proc = subprocess.run([str(sim), "run", "--trace", str(trace), "--policy", policy,
                           "--budget", str(int(budget_bytes)), "--json",
                           "--max-overhead", str(MAX_REPLAY_OVERHEAD),
                           "--allocator", memory, *limit], capture_output=True, text=True,
                          env=env)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def fail(message, run_=None):
    tail = "\n".join(run_.stderr.strip().splitlines()[-5:]) if run_ else ""
    sys.exit(f"{message}\n{tail}")
