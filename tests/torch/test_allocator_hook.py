"""The CPU allocator hook: an unmodified script trains bit for bit as without the
library, with its tensors allocated (and counted) by dtr's caching allocator, whether the
library comes by LD_PRELOAD or by torch.ops.load_library, and under a hard budget."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON, SCRIPTS, Result, clean_env, driver, run

MLP = ("mlp.py", "--steps", "5")
CNN = ("cnn.py", "--steps", "3", "--depth", "4")
LAUNCHER = str(SCRIPTS / "launcher.py")


def shim_of(lib):
    """libdtr_preload.so, built beside the library (Note [Preload shim] in process_kind.cpp)."""
    return os.path.join(os.path.dirname(os.path.realpath(lib)), "libdtr_preload.so")


def reports(stderr):
    """Every `dtr: report` line's JSON object, in order."""
    return [json.loads(line[len("dtr: report "):]) for line in stderr.splitlines()
            if line.startswith("dtr: report ")]


@pytest.fixture(scope="module")
def baseline():
    """The MLP without the library: the reference for every comparison."""
    result = Result(run(driver(*MLP), clean_env()))
    assert not result.enabled
    assert len(result.losses()) == 5 and len(result.params()) == 8
    return result


def assert_same_training(result, baseline):
    # Loss lines carry the float32 bit pattern; param lines a sha256 of the raw bytes.
    assert result.losses() == baseline.losses()
    assert result.params() == baseline.params()


def assert_went_through_dtr(result):
    assert result.enabled, result.proc.stderr
    stats = result.stats
    assert stats["allocation.all.allocated"] > 0
    assert stats["allocated_bytes.all.peak"] > 0
    assert stats["reserved_bytes.all.peak"] >= stats["allocated_bytes.all.peak"]
    assert stats["num_ooms"] == 0
    return stats


def test_ld_preload_is_bit_identical(lib, baseline):
    result = Result(run(driver(*MLP), clean_env(LD_PRELOAD=lib)))
    assert_same_training(result, baseline)
    stats = assert_went_through_dtr(result)
    # Every step allocates activations and gradients: far more than a handful of blocks.
    assert stats["allocation.all.allocated"] > 100
    # The initializer handed LD_PRELOAD to the shim: children load libtorch only where they
    # can run PyTorch ops (Note [Preload shim]).
    assert result.facts["ld_preload"] == shim_of(lib)


def test_ld_preload_keeps_other_preloads(lib):
    # Another preloaded library (libmimalloc, harmless) stays for the children.
    other = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"
    result = Result(run(driver(*MLP), clean_env(LD_PRELOAD=f"{lib}:{other}")))
    assert result.enabled
    assert result.facts["ld_preload"] == f"{shim_of(lib)} {other}"


@pytest.mark.parametrize("wrapper", [["timeout", "300"], ["/usr/bin/env"], ["nice", "-n", "0"]])
def test_ld_preload_through_a_wrapper_reaches_python(lib, baseline, wrapper):
    # Note [Wrapper processes] (runtime.cpp): the library loads into the wrapper first; it
    # must leave LD_PRELOAD for Python there, or the script runs without a budget, silently.
    result = Result(run([*wrapper, *driver(*MLP)], clean_env(LD_PRELOAD=lib)))
    assert_same_training(result, baseline)
    assert_went_through_dtr(result)
    assert result.facts["ld_preload"] == shim_of(lib)  # Python handed it to the shim


def test_only_processes_that_can_run_torch_ops_start(lib, tmp_path):
    # A C++ program whose executable needs libc10 starts the runtime (its report at exit);
    # one that does not prints nothing.
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("no g++ to build the two programs")
    source = tmp_path / "main.cpp"
    source.write_text("#include <cstdlib>\nint main() { return std::system(\"echo LDP=$LD_PRELOAD\"); }\n")
    needs, plain = tmp_path / "needs_c10", tmp_path / "plain"
    subprocess.run([gxx, str(source), "-o", str(needs), "-Wl,--no-as-needed", "-lc10"], check=True)
    subprocess.run([gxx, str(source), "-o", str(plain)], check=True)
    env = clean_env(LD_PRELOAD=lib, DTR_REPORT="1")
    started = run([str(needs)], env)
    assert "dtr: report" in started.stderr, started.stderr
    assert f"LDP={shim_of(lib)}\n" in started.stdout, started.stdout  # the shim, for children
    # Through the shim (a child of a dtr process) the program starts it too, at once.
    via_shim = run([str(needs)], clean_env(LD_PRELOAD=shim_of(lib), DTR_REPORT="1"))
    assert "dtr: report" in via_shim.stderr, via_shim.stderr
    left = run([str(plain)], env)
    assert "dtr: report" not in left.stderr, left.stderr
    # Handed to the shim, which loads the library into its children where they can run
    # ops (Note [Preload shim]).
    assert f"LDP={shim_of(lib)}\n" in left.stdout, left.stdout


def test_python_child_of_a_launcher_runs_under_dtr(lib):
    # Note [Preload shim]: a launcher's Python child (torchrun's workers, a job script's
    # `python3 train.py`) trains through dtr under the same budget, bit for bit; until
    # 2026-11-28 it ran without the library, silently. A child that is not Python (cat),
    # and a Python child that does not import torch, map the shim and nothing of torch.
    # The CNN at 0.7 of its peak: far above its floor (0.35, test_remat.py); the MLP's
    # floor, 0.8-0.9 with the optimizer's pinned writes, moved between runs.
    plain = Result(run(driver(*CNN), clean_env()))
    free = Result(run(driver(*CNN), clean_env(LD_PRELOAD=lib)))
    budget = int(free.stats["allocated_bytes.all.peak"] * 0.7)
    proc = run([PYTHON, LAUNCHER, "--maps", *driver(*CNN)[1:]],
               clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{budget}", DTR_REPORT="1"))
    result = Result(proc)
    assert_same_training(result, plain)
    assert result.buffers() == plain.buffers()
    stats = assert_went_through_dtr(result)
    assert stats["allocated_bytes.all.peak"] <= budget
    assert stats["dtr.num_evictions"] > 0, stats
    # Note [Loading at import torch] (preload_shim.cpp): a Python child that imports no
    # torch loads nothing of it either.
    maps = [l for l in result.lines if l.startswith("LAUNCHER maps ")]
    assert maps == ["LAUNCHER maps cat libdtr_preload.so",
                    "LAUNCHER maps python libdtr_preload.so"], result.lines
    child, launcher = reports(proc.stderr)  # the child exits first, its report first
    assert child["budget_bytes"] == launcher["budget_bytes"] == budget
    assert child["pid"] != launcher["pid"]
    assert child["allocated_bytes.all.peak"] == stats["allocated_bytes.all.peak"]


def test_files_of_child_processes(lib, tmp_path):
    # Note [Files of child processes] (runtime.cpp): the launcher writes the trace it was
    # given, its child `<path>.<pid>`; `%p` is the writer's pid in both.
    for name in ("run.trace", "run-%p.trace"):
        proc = run([PYTHON, LAUNCHER, *driver("mlp.py", "--steps", "2")[1:]],
                   clean_env(LD_PRELOAD=lib, DTR_TRACE=str(tmp_path / name), DTR_REPORT="1"))
        child, launcher = (r["pid"] for r in reports(proc.stderr))
        if "%p" in name:
            ours, theirs = tmp_path / f"run-{launcher}.trace", tmp_path / f"run-{child}.trace"
        else:
            ours, theirs = tmp_path / "run.trace", tmp_path / f"run.trace.{child}"
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([ours.name, theirs.name])
        # The child trained (hundreds of ops); the launcher ran none.
        assert theirs.stat().st_size > 10 * ours.stat().st_size, proc.stderr
        for p in tmp_path.iterdir():
            p.unlink()
    # A child started with the library itself in LD_PRELOAD (a harness that reads the
    # trace back) writes the path it was given.
    harness = ("import os, subprocess, sys\n"
               "env = dict(os.environ, LD_PRELOAD=sys.argv[1], DTR_TRACE=sys.argv[2])\n"
               "subprocess.run([sys.executable, *sys.argv[3:]], env=env, check=True)\n")
    run([PYTHON, "-c", harness, lib, str(tmp_path / "asked.trace"),
         *driver("mlp.py", "--steps", "2")[1:]], clean_env(LD_PRELOAD=lib))
    assert [p.name for p in tmp_path.iterdir()] == ["asked.trace"]


def test_preload_shim_by_hand(lib, baseline):
    # LD_PRELOAD=libdtr_preload.so: the shim loads the library beside it into Python.
    shim = shim_of(lib)
    result = Result(run(driver(*MLP), clean_env(LD_PRELOAD=shim)))
    assert_same_training(result, baseline)
    assert_went_through_dtr(result)
    assert result.facts["ld_preload"] == shim


def test_preload_shim_without_its_library(lib, tmp_path):
    # A shim with no libdtr_torch.so beside it stops a Python process at `import torch`
    # with the reason (running on without the budget asked for would be silent), and
    # leaves `true` and a Python that imports no torch alone.
    shim = tmp_path / "libdtr_preload.so"
    shutil.copy(shim_of(lib), shim)
    env = clean_env(LD_PRELOAD=str(shim))
    proc = run([PYTHON, "-c", "print('before')\nimport torch\nprint('after')"], env,
               check=False)
    assert proc.returncode == 2, proc
    assert "could not load" in proc.stderr and "libdtr_torch.so" in proc.stderr, proc.stderr
    assert "before" in proc.stdout and "after" not in proc.stdout
    assert run([PYTHON, "-c", "print('ran')"], env).stdout == "ran\n"
    assert run(["true"], env, check=False).returncode == 0


def test_load_library_is_bit_identical(lib, baseline):
    result = Result(run(driver(*MLP, load_library=lib), clean_env()))
    assert_same_training(result, baseline)
    assert_went_through_dtr(result)


def test_tensor_from_before_loading_keeps_its_deleter(lib, baseline):
    # A tensor made by PyTorch's default allocator before load_library is freed after it:
    # our free() would stop the process (DTR_CHECK) if it ever saw that pointer.
    result = Result(run(driver(*MLP, load_library=lib, tensor_first=True), clean_env()))
    assert_same_training(result, baseline)
    assert_went_through_dtr(result)


def test_peak_stays_within_budget(lib, baseline):
    free = Result(run(driver(*MLP), clean_env(LD_PRELOAD=lib)))
    peak = free.stats["allocated_bytes.all.peak"]
    # The budget is exactly the unconstrained peak: the run must fit, identically, and
    # never go above it.
    result = Result(run(driver(*MLP), clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{peak}")))
    assert_same_training(result, baseline)
    stats = assert_went_through_dtr(result)
    assert 0 < stats["allocated_bytes.all.peak"] <= peak


def test_report_at_exit(lib):
    proc = run(driver(*MLP), clean_env(LD_PRELOAD=lib, DTR_REPORT="1",
                                       DTR_CONF="budget:64M"))
    result = Result(proc)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("dtr: report ")]
    assert len(lines) == 1, proc.stderr
    report = json.loads(lines[0][len("dtr: report "):])
    assert report["budget_bytes"] == 64 * 1024 * 1024
    assert report["allocated_bytes.all.peak"] == result.stats["allocated_bytes.all.peak"]
    assert report["reserved_bytes.all.peak"] >= report["allocated_bytes.all.peak"] > 0
    assert report["num_ooms"] == 0


def test_no_report_by_default(lib):
    proc = run(driver(*MLP), clean_env(LD_PRELOAD=lib))
    assert "dtr: report" not in proc.stderr


MALLOC_OWNER = r"""
import ctypes, sys
if len(sys.argv) > 1:
    import torch
    torch.ops.load_library(sys.argv[1])
mi = ctypes.CDLL("libmimalloc.so.2")   # already loaded by libdtr_torch.so
mi.mi_is_in_heap_region.argtypes = [ctypes.c_void_p]
mi.mi_is_in_heap_region.restype = ctypes.c_bool
mi.mi_malloc.restype = ctypes.c_void_p
libc_malloc = ctypes.CDLL(None).malloc  # what the process's malloc() resolves to
libc_malloc.restype = ctypes.c_void_p
print("MIMALLOC_SEES_MI", int(mi.mi_is_in_heap_region(mi.mi_malloc(1 << 16))))
print("MIMALLOC_SEES_MALLOC", int(mi.mi_is_in_heap_region(libc_malloc(1 << 16))))
"""


def test_process_malloc_stays_libc(lib):
    # Note [mimalloc stays private] (integration/torch/CMakeLists.txt): libmimalloc.so
    # exports malloc, but loading the library must not make it the process's malloc.
    from conftest import PYTHON
    for args, env in (([], clean_env(LD_PRELOAD=lib)), ([lib], clean_env())):
        proc = run([PYTHON, "-c", MALLOC_OWNER, *args], env)
        assert "MIMALLOC_SEES_MI 1" in proc.stdout, proc.stdout  # the check works
        assert "MIMALLOC_SEES_MALLOC 0" in proc.stdout, proc.stdout
