"""A remat runs in the state its op first ran in (Note [Op context] in
integration/torch/lineage.cpp). Each script makes three tensors in one state, evicts them
under a budget, and reads them back (through numpy, which refills them) in another: the
bytes must be those the run without the library reads. Before, the remat ran in the
reader's state: inside torch.autocast the process died on a size check (the mm ran in
bfloat16), after torch.set_flush_denormal(False) flushed zeros came back as denormals,
after torch.set_default_dtype(torch.float64) an integer division came back in float64,
with mkldnn enabled again a convolution made without it came back from the other
kernel (the sum of one of the three read 3981088.25 against 3981088.5), under no_grad a
kernel that reads grad mode computed its other branch (PyTorch 2.11's LSTM kernel returned
no workspace, and backward died on it), a kernel that reads the thread count used
the reader's count after torch.set_num_threads, and quantized::add ran the reader's
quantized engine."""
import re

import pytest

from conftest import PYTHON, clean_env, run

SCRIPT = r"""
import hashlib, torch
try:
    import dtr
except ImportError:
    dtr = None
torch.manual_seed(0)
MAKE
if dtr is not None and dtr.is_enabled():
    dtr.set_budget(BUDGET)
    filler = torch.ones(FILLER)
    del filler
    print("EVICTED", dtr.memory_stats()["dtr.num_evictions"] > 0)
READ
    digests = [hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16] for y in ys]
print("DIGESTS", *digests, *(str(y.dtype) for y in ys))
if dtr is not None and dtr.is_enabled():
    print("REMATS", dtr.memory_stats()["dtr.num_remats"])
"""


def sinh_kernel(result):
    """MAKE's start: aten::sinh on CPU replaced by a kernel returning `result` of x, and w."""
    return ("lib = torch.library.Library('aten', 'IMPL')\n"
            "def sinh(x):\n"
            f"    return {result}\n"
            "lib.impl('sinh', sinh, 'CPU')\n"
            "w = torch.randn(1024, 1024)\n")


CASES = {
    # fp32 mm results made outside autocast, read inside it.
    "autocast": dict(
        MAKE="w = torch.randn(1024, 1024)\nys = [w @ (w + i) for i in range(3)]",
        READ="with torch.autocast('cpu', dtype=torch.bfloat16):",
        BUDGET='"24M"', FILLER="3 * 2 ** 20"),
    # Products flushed to zero while flush-to-zero was on, read with it off.
    "flush_denormal": dict(
        MAKE="w = torch.randn(1024, 1024)\ntorch.set_flush_denormal(True)\n"
             "ys = [(w + i) * 1e-39 for i in range(3)]\ntorch.set_flush_denormal(False)",
        READ="if True:",
        BUDGET='"24M"', FILLER="3 * 2 ** 20"),
    # int64 / int -> the default dtype (float32) when made; float64 when read.
    "default_dtype": dict(
        MAKE="n = torch.randint(1, 100, (1024, 1024))\nys = [(n + i) / 7 for i in range(3)]",
        READ="torch.set_default_dtype(torch.float64)\nif True:",
        BUDGET='"32M"', FILLER="4 * 2 ** 20"),
    # A convolution made with mkldnn disabled (the native kernel), read with it enabled.
    "mkldnn": dict(
        MAKE="x = torch.randn(16, 16, 64, 64)\nw = torch.randn(16, 16, 3, 3)\n"
             "with torch.backends.mkldnn.flags(enabled=False):\n"
             "    ys = [torch.nn.functional.conv2d(x + i, w, padding=1) for i in range(3)]",
        READ="if True:",
        BUDGET='"60M"', FILLER="12 * 2 ** 20"),
    # A kernel that reads grad mode, as PyTorch 2.x's mkldnn_rnn_layer does (no workspace
    # without it); made in grad mode, read under no_grad (as a backward pass runs).
    "grad_mode": dict(
        MAKE=sinh_kernel("x * 2 if torch.is_grad_enabled() else x * 3")
             + "ys = [torch.sinh(w + i) for i in range(3)]",
        READ="with torch.no_grad():",
        BUDGET='"24M"', FILLER="3 * 2 ** 20"),
    # A kernel that reads the intra-op thread count, standing for those whose work split
    # follows it (index_put_ with accumulate: Note [Thread-order results]); made on two
    # threads (conftest's OMP_NUM_THREADS), read on one, and the other way round.
    "threads_lowered": dict(
        MAKE=sinh_kernel("x * (2 + torch.get_num_threads())")
             + "ys = [torch.sinh(w + i) for i in range(3)]",
        READ="torch.set_num_threads(1)\nif True:",
        BUDGET='"24M"', FILLER="3 * 2 ** 20"),
    # quantized::add picks its kernel by torch.backends.quantized.engine: made under onednn,
    # read after the program switched to qnnpack (a probe, 2026-12-07: 31 remats, other
    # bits). int_repr() reads the quantized values (numpy cannot take a quantized tensor).
    "qengine": dict(
        MAKE="torch.backends.quantized.engine = 'onednn'\n"
             "a = torch.quantize_per_tensor(torch.randn(1024, 1024), 0.05, 128, torch.quint8)\n"
             "b = torch.quantize_per_tensor(torch.randn(1024, 1024), 0.04, 120, torch.quint8)\n"
             "qs = [torch.ops.quantized.add(a, b, 0.07 + 0.001 * i, 128) for i in range(3)]\n"
             "ys = qs",
        READ="torch.backends.quantized.engine = 'qnnpack'\nys = [q.int_repr() for q in qs]\n"
             "if True:",
        BUDGET='"7M"', FILLER="2 ** 20"),
    "threads_raised": dict(
        MAKE=sinh_kernel("x * (2 + torch.get_num_threads())") + "torch.set_num_threads(1)\n"
             "ys = [torch.sinh(w + i) for i in range(3)]",
        READ="torch.set_num_threads(2)\nif True:",
        BUDGET='"24M"', FILLER="3 * 2 ** 20"),
}


def script(case):
    text = SCRIPT
    for key, value in CASES[case].items():
        text = text.replace(key, value)
    return text


@pytest.mark.parametrize("case", CASES)
def test_a_remat_runs_in_the_state_its_op_ran_in(lib, case):
    text = script(case)
    plain = run([PYTHON, "-c", text], clean_env())
    expected = re.search(r"^DIGESTS .*$", plain.stdout, re.M).group(0)
    # The ys are made from temporaries the script drops, which dtr_eq charges 30 times (Note
    # [Live storages on dead lineage]): others were evicted instead, and nothing was remade. The
    # test needs the ys evicted, so it scores as simrd does.
    proc = run([PYTHON, "-c", text], clean_env(LD_PRELOAD=lib, DTR_CONF="dead_lineage_factor:1"),
               check=False)
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout, (expected, proc.stdout + proc.stderr)
    assert int(re.search(r"^REMATS (\d+)", proc.stdout, re.M).group(1)) > 0, proc.stdout


# A forked child that set one thread, as a DataLoader worker does, reads tensors its parent
# made on two threads and evicted. Its remats run on its one thread: raising the count
# there hung GNU OpenMP, whose pool does not survive a fork (these ops run in parallel).
FORKED = r"""
import os, torch, dtr
torch.manual_seed(0)
w = torch.randn(1024, 1024)
ys = [torch.tanh(w + i) for i in range(3)]
dtr.set_budget("24M")
filler = torch.ones(3 * 2 ** 20)
del filler
print("EVICTED", dtr.memory_stats()["dtr.num_evictions"] > 0, flush=True)
pid = os.fork()
if pid == 0:
    torch.set_num_threads(1)
    total = sum(float(y.numpy().sum()) for y in ys)
    os._exit(0 if dtr.memory_stats()["dtr.num_remats"] > 0 else 3)
_, status = os.waitpid(pid, 0)
print("CHILD", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_remakes_on_its_own_thread_count(lib):
    proc = run([PYTHON, "-c", FORKED], clean_env(LD_PRELOAD=lib), timeout=120)
    assert "EVICTED True" in proc.stdout and "CHILD 0" in proc.stdout, proc.stdout + proc.stderr
