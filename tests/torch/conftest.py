"""Shared set-up for the PyTorch integration tests (run by ctest as `torch.pytest`).

Every test starts fresh /usr/bin/python3 processes, with and without libdtr_torch.so, and
compares what they print: the pytest process itself never loads the library.
The library comes from DTR_LIBRARY (ctest sets it) or build/lib; dtr-run from DTR_RUN or
build/bin. Without torch in this Python the whole run stops with exit status 77, which
ctest reports as skipped, and says why.
"""
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PYTHON = os.environ.get("DTR_PYTHON", "/usr/bin/python3")

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIPPED: tests/torch need PyTorch in {sys.executable}: {exc} "
          "(Debian: apt-get install python3-torch)", flush=True)
    sys.exit(77)


def pytest_configure(config):
    # pytest-xdist registers this mark itself; without it (a run by hand) it groups nothing.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")


def library_path():
    return Path(os.environ.get("DTR_LIBRARY", ROOT / "build" / "lib" / "libdtr_torch.so"))


def dtr_run_path():
    return Path(os.environ.get("DTR_RUN", ROOT / "build" / "bin" / "dtr-run"))


@pytest.fixture(scope="session")
def lib():
    path = library_path()
    if not path.exists():
        pytest.skip(f"{path} is not built (cmake --build <dir> --target dtr_torch)")
    return str(path)


@pytest.fixture(scope="session")
def dtr_run():
    path = dtr_run_path()
    if not path.exists():
        pytest.skip(f"{path} is not built (cmake --build <dir> --target dtr-run)")
    return str(path)


def clean_env(**extra):
    """The environment minus anything dtr-related, plus `extra` (None values removed)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DTR_") and k != "LD_PRELOAD"}
    env["PYTHONPATH"] = str(ROOT / "python")
    env["DTR_LIBRARY"] = str(library_path())
    # Same thread count in every run: results are compared bit for bit. MKL (pip builds of
    # PyTorch; Debian's uses OpenBLAS) may otherwise use fewer threads on a loaded machine.
    env["OMP_NUM_THREADS"] = "2"
    # Idle OpenMP threads sleep at once rather than spin: with two threads a process, and
    # a process a core under pytest-xdist, spinning doubled a plain step here (docs/pytorch.md,
    # "OpenMP's wait policy"). The thread count, so every result's bits, is the same.
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["MKL_DYNAMIC"] = "FALSE"
    for k, v in extra.items():
        if v is not None:
            env[k] = v
    return env


def run(args, env, check=True, timeout=600, cwd=None):
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


def left_as_thrashing(warning):
    """The candidates a thrash or runaway line says `auto` left ("... auto has left msps
    and dtr_eq as thrashing. ..."; ThrashWatch::advice); [] where it names none."""
    m = re.search(r"\. auto has left (.*?) as thrashing\. ", warning)
    return re.split(r", | and ", m.group(1)) if m else []


def last_json(proc):
    """The JSON object a test program printed on its last line."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stats_of(code, lib, *args, conf=None):
    """Runs `code` (python -c, with `args`) under the library and DTR_CONF=`conf`: its last
    line, a JSON object."""
    return last_json(run([PYTHON, "-c", code, *map(str, args)],
                         clean_env(LD_PRELOAD=lib, DTR_CONF=conf)))


# The program side of trains_as_without, for programs written in a test file.
# apply_budget() sets the budget argv gives (a fraction, 0 for none, of a peak in bytes)
# where the program calls it; record(loss) keeps a loss's bit pattern, digest(name, t) a tensor's
# sha256; finish(model) digests the model's state_dict and prints the JSON object, with the
# peak, evictions and remats under the library.
TRAINING_PRELUDE = r"""
import hashlib, json, struct, sys
import torch, torch.nn as nn, torch.nn.functional as F
try:
    import dtr
except ImportError:
    dtr = None
torch.manual_seed(0)
OUT = {"losses": [], "params": {}}

def apply_budget():
    if dtr is not None and dtr.is_enabled() and float(sys.argv[1]) > 0:
        dtr.set_budget(int(float(sys.argv[1]) * int(sys.argv[2])))

def record(loss):
    OUT["losses"].append(struct.pack("<f", float(loss)).hex())

def digest(name, t):
    t = t.detach().contiguous()
    t = torch.view_as_real(t) if t.is_complex() else t
    OUT["params"][name] = hashlib.sha256(t.numpy().tobytes()).hexdigest()

def finish(model=None):
    for name, t in (model.state_dict().items() if model is not None else ()):
        digest(name, t)
    if dtr is not None and dtr.is_enabled():
        s = dtr.memory_stats()
        OUT.update(peak=s["allocated_bytes.all.peak"], evictions=s["dtr.num_evictions"],
                   remats=s["dtr.num_remats"])
    print(json.dumps(OUT))
"""


def trains_as_without(code, lib, fractions):
    """Runs `code` (python -c; argv: a budget fraction, 0 for none, and a peak in bytes;
    it prints a JSON object with "losses" and "params", and "peak" and "evictions" under
    the library: TRAINING_PRELUDE writes it) without the library, then with remat:False
    for the peak, then at each fraction of that peak: every budget run must evict, stay
    under its budget and print the plain run's losses and parameters. Returns what the
    budget runs printed."""
    plain = last_json(run([PYTHON, "-c", code, "0", "0"], clean_env()))
    peak = stats_of(code, lib, 0, 0, conf="remat:False")["peak"]
    runs = []
    for fraction in fractions:
        under = stats_of(code, lib, fraction, peak)
        assert under["evictions"] > 0 and under["peak"] <= int(fraction * peak), under
        assert (under["losses"], under["params"]) == (plain["losses"], plain["params"]), under
        runs.append(under)
    return runs


def driver(*script_args, load_library=None, tensor_first=False):
    """argv running SCRIPTS/<script_args[0]> through run_script.py."""
    argv = [PYTHON, str(SCRIPTS / "run_script.py")]
    if load_library:
        argv += ["--load-library", load_library]
    if tensor_first:
        argv += ["--make-tensor-first"]
    return argv + ["--", str(SCRIPTS / script_args[0]), *script_args[1:]]


class Result:
    """What a run_script.py run printed: the script's lines and the DTR_TEST facts."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = []
        self.facts = {}
        for line in proc.stdout.splitlines():
            if line.startswith("DTR_TEST "):
                key, _, value = line[len("DTR_TEST "):].partition(" ")
                self.facts[key] = value
            else:
                self.lines.append(line)

    @property
    def enabled(self):
        return self.facts.get("enabled") == "1"

    @property
    def stats(self):
        return json.loads(self.facts["stats"])

    def losses(self):
        return [line.split()[2] for line in self.lines if line.startswith("loss ")]

    def params(self):
        return [line for line in self.lines if line.startswith("param ")]

    def buffers(self):
        return [line for line in self.lines if line.startswith("buffer ")]


@functools.lru_cache(maxsize=None)
def reference_run(script_args):
    """SCRIPTS/<script_args[0]> without the library: what every budgeted run of it must
    reproduce. Cached per pytest process (per xdist worker), as is `baseline_peak`."""
    result = Result(run(driver(*script_args), clean_env()))
    assert result.losses(), result.proc.stdout
    return result


@functools.lru_cache(maxsize=None)
def baseline_peak(script_args, lib):
    """Peak live bytes of SCRIPTS/<script_args[0]> under dtr's allocator with no eviction
    machinery (remat:False): the budgets are fractions of it."""
    result = Result(run(driver(*script_args), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    assert result.enabled, result.proc.stderr
    return result.stats["allocated_bytes.all.peak"]


def trains_bit_identically(lib, script_args, fraction, conf=None, **env):
    """SCRIPTS/<script_args[0]> (through run_script.py) under `fraction` of its baseline
    peak, with the DTR_CONF entries `conf` and the variables `env` added: asserts that it
    ended without an out-of-memory error, printed the losses, parameters and buffers of the
    run without the library, stayed within its budget, and evicted and rematerialized (a
    run that never evicted proves nothing); returns its Result."""
    ref = reference_run(tuple(script_args))
    budget = int(baseline_peak(tuple(script_args), lib) * fraction)
    proc = run(driver(*script_args), clean_env(
        LD_PRELOAD=lib, DTR_CONF=",".join(filter(None, (f"budget:{budget}", conf))), **env),
        check=False)
    assert proc.returncode == 0, f"budget {budget} B ({fraction}x):\n{proc.stderr[-3000:]}"
    result = Result(proc)
    assert result.losses() == ref.losses()
    assert result.params() == ref.params()
    assert result.buffers() == ref.buffers()
    stats = result.stats
    assert stats["allocated_bytes.all.peak"] <= budget
    assert stats["num_ooms"] == 0
    assert stats["dtr.num_evictions"] > 0, stats
    assert stats["dtr.num_remats"] > 0, stats
    return result
