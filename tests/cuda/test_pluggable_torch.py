"""dtr_malloc / dtr_free behind torch.cuda.memory.CUDAPluggableAllocator, on a real GPU.

Needs build/lib/libdtr_cuda.so (or DTR_CUDA_LIBRARY); the tests that run PyTorch also need
PyTorch >= 2.0 (CUDAPluggableAllocator) and a CUDA device, and skip saying which is
missing: Debian's torch 1.13 on the CPU machines has neither the class nor a GPU. Every run
is its own process (tests/cuda/pluggable_child.py), since the allocator can only be swapped
before CUDA allocates anything.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CHILD = HERE / "pluggable_child.py"
LIBRARY = pathlib.Path(os.environ.get(
    "DTR_CUDA_LIBRARY", HERE.parent.parent / "build" / "lib" / "libdtr_cuda.so"))



def gpu_torch_missing():
    """Why the torch tests cannot run here, or '' when they can."""
    try:
        import torch
    except ImportError:
        return "no torch"
    if not hasattr(torch.cuda, "memory") or not hasattr(torch.cuda.memory,
                                                         "CUDAPluggableAllocator"):
        return f"torch {torch.__version__} has no CUDAPluggableAllocator (needs 2.0 or later)"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return ""


if not LIBRARY.exists():
    pytest.skip(f"{LIBRARY} not built (configure with DTR_WITH_CUDA=ON)", allow_module_level=True)
needs_gpu_torch = pytest.mark.skipif(bool(gpu_torch_missing()), reason=gpu_torch_missing())


def test_loading_the_library_brings_no_mimalloc():
    # Note [No mimalloc in a dlopen'd library] (allocator/caching_allocator.cpp): loaded
    # the way PyTorch loads it (dlopen, RTLD_LOCAL), the library must neither pull in
    # libmimalloc nor change the process's malloc. Needs no GPU: nothing here calls CUDA.
    code = f"""
import ctypes, os
def address(function): return ctypes.cast(function, ctypes.c_void_p).value
before = address(ctypes.CDLL(None).malloc)
ctypes.CDLL({str(LIBRARY)!r}, mode=os.RTLD_LAZY)
maps = open("/proc/self/maps").read()
print(address(ctypes.CDLL(None).malloc) == before, "libmimalloc" in maps)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"], done.stdout


def test_dtr_cuda_reads_the_library_without_a_gpu():
    # python/dtr/cuda.py over the C ABI: a device that never allocated reports zeros.
    code = f"""
import json, os, sys
sys.path.insert(0, {str(HERE.parent.parent / "python")!r})
os.environ["DTR_BUDGET"] = "3G"
import dtr.cuda
import ctypes
ctypes.CDLL(os.environ.pop("DTR_CUDA_LIBRARY"))  # found as loaded, not through the variable
stats = dtr.cuda.memory_stats(5)
print(json.dumps([stats["allocated_bytes.all.current"], stats["dtr.budget_bytes"],
                  "reserved_bytes.large_pool.peak" in stats, dtr.cuda.empty_cache(5)]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, DTR_CUDA_LIBRARY=str(LIBRARY)))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [0, 3 << 30, True, 0]


def test_dtr_cuda_use_says_what_it_needs():
    missing = gpu_torch_missing()
    if "CUDAPluggableAllocator" not in missing:
        pytest.skip("this torch has CUDAPluggableAllocator")
    code = f"""
import sys
sys.path.insert(0, {str(HERE.parent.parent / "python")!r})
import dtr, dtr.cuda
try:
    dtr.cuda.use(budget="1G")
except dtr.DtrError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, DTR_CUDA_LIBRARY=str(LIBRARY)))
    assert done.returncode == 0, done.stderr
    assert "needs PyTorch 2.0 or later" in done.stdout, done.stdout


def run_child(mode, library, arg, check=True, **env):
    child_env = dict(os.environ)
    child_env.pop("DTR_CONF", None)
    child_env.pop("DTR_BUDGET", None)
    child_env.update(env)
    done = subprocess.run([sys.executable, str(CHILD), mode, library, str(arg)],
                          env=child_env, capture_output=True, text=True, timeout=300)
    if not check:
        return None, done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@needs_gpu_torch
def test_training_is_bit_identical_to_pytorchs_allocator():
    native, _ = run_child("train", "-", 8)
    ours, stderr = run_child("train", str(LIBRARY), 8, DTR_BUDGET="8G")
    assert "dtr:" not in stderr, stderr
    assert ours["loss_bits"] == native["loss_bits"]
    assert ours["state_sha256"] == native["state_sha256"]


@needs_gpu_torch
def test_request_over_budget_is_refused_with_a_message():
    out, stderr = run_child("refuse", str(LIBRARY), 256 << 20, DTR_BUDGET="64M")
    assert out["small_ok"]
    assert "over budget" in stderr and "DTR_BUDGET" in stderr, stderr
    # PyTorch does not turn the nullptr into an error by itself (Note [Null from
    # dtr_malloc]); whichever it does, the program must not get a usable-looking tensor.
    if out["outcome"] == "tensor":
        assert out["data_ptr"] == 0, out
    else:
        assert out["type"] in ("OutOfMemoryError", "RuntimeError"), out


@needs_gpu_torch
def test_invalid_configuration_refuses_with_the_reason():
    # Every request is refused, the first one too, so the child may die of it: only the
    # message matters here.
    _, stderr = run_child("refuse", str(LIBRARY), 1 << 20, check=False,
                          DTR_CONF="budget:8G,bogus:1")
    assert "configuration is invalid" in stderr, stderr
    assert "bogus" in stderr, stderr


@needs_gpu_torch
def test_dtr_cuda_stats_after_training():
    native, _ = run_child("train", "-", 4)
    out, stderr = run_child("stats", str(LIBRARY), 4)
    assert out["loss_bits"] == native["loss_bits"]  # dtr.cuda.use() is the same allocator
    stats = out["stats"]
    assert stats["dtr.budget_bytes"] == 8 << 30
    assert stats["dtr.streams"] >= 1
    assert stats["num_ooms"] == 0
    assert 0 < stats["allocated_bytes.all.current"] <= stats["allocated_bytes.all.peak"]
    assert stats["allocated_bytes.all.peak"] <= stats["reserved_bytes.all.peak"]
    assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"]
    assert stats["num_device_alloc"] == stats["segment.all.current"] + stats["num_device_free"]
    after = out["after_empty"]
    assert out["released"] == stats["reserved_bytes.all.current"] - after["reserved_bytes.all.current"]
    assert after["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]
