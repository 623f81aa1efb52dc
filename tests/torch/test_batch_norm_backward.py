"""The lean batch-norm backward (Note [Lean batch-norm backward] in
integration/torch/compat.cpp): under a budget, native_batch_norm_backward runs with one
grad_input buffer where PyTorch's CPU kernel allocates two, and gives the kernel's bits,
sizes and strides in every case, including those it leaves to the kernel."""
from conftest import PYTHON, clean_env, run

SCRIPT = r"""
import hashlib, torch
torch.manual_seed(0)
bnb = torch.ops.aten.native_batch_norm_backward

def case(name, shape, *, fmt=None, grad_fmt=None, dtype=torch.float32, train=True,
         weight=True, mask=(True, True, True), strided=False):
    x = torch.randn(shape, dtype=dtype)
    g = torch.randn(shape, dtype=dtype)
    if fmt is not None: x = x.contiguous(memory_format=fmt)
    if grad_fmt is not None: g = g.contiguous(memory_format=grad_fmt)
    if strided: x, g = x.transpose(0, 1).contiguous().transpose(0, 1), g[:]
    c = shape[1]
    dims = [d for d in range(len(shape)) if d != 1]
    w = torch.randn(c, dtype=dtype) if weight else None
    rm, rv = torch.randn(c, dtype=dtype), torch.rand(c, dtype=dtype) + 0.5
    sm = x.mean(dims)
    si = 1 / (x.var(dims, unbiased=False) + 1e-5).sqrt()
    out = bnb(g, x, w, rm, rv, sm, si, train, 1e-5, list(mask))
    for i, t in enumerate(out):
        if t is None:
            print(name, i, "undefined"); continue
        digest = hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]
        print(name, i, tuple(t.shape), t.stride(), t.dtype, digest)

cl = torch.channels_last
case("nchw", (8, 16, 12, 12))
case("channels_last", (8, 16, 12, 12), fmt=cl, grad_fmt=cl)
case("double", (4, 8, 10, 10), dtype=torch.float64)
case("2d", (64, 32))
case("3d", (8, 16, 40))
case("eval", (8, 16, 12, 12), train=False)
case("no_weight", (8, 16, 12, 12), weight=False)
case("input_only", (8, 16, 12, 12), mask=(True, False, False))
case("weights_only", (8, 16, 12, 12), mask=(False, True, True))
case("mixed_formats", (8, 16, 12, 12), grad_fmt=cl)       # PyTorch's kernel runs
case("strided", (8, 16, 12, 12), strided=True)             # PyTorch's kernel runs

import dtr
if dtr.is_loaded():
    # The op's own peak: 16 MiB of grad_input over its inputs (PyTorch's kernel: 32 MiB).
    x = torch.randn(16, 64, 64, 64)
    g = torch.randn_like(x)
    w, rm, rv = torch.randn(64), torch.zeros(64), torch.ones(64)
    sm, si = x.mean((0, 2, 3)), torch.ones(64)
    before = dtr.memory_stats()["allocated_bytes.all.current"]
    dtr.reset_peak_stats()
    out = bnb(g, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True])
    print("stats", dtr.memory_stats()["allocated_bytes.all.peak"] - before, out[0].numel() * out[0].element_size())
"""


def test_lean_batch_norm_backward_matches_the_kernel(lib):
    plain = run([PYTHON, "-c", SCRIPT], clean_env())
    under = run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:2G"))
    ours = [l for l in under.stdout.splitlines() if not l.startswith("stats ")]
    assert ours == plain.stdout.splitlines(), under.stdout + under.stderr
    assert len(ours) == 33
    import platform, pytest, torch
    if not (torch.__version__.startswith("1.13.") and platform.machine() == "x86_64"):
        # DTR_TORCH_LEAN_BATCH_NORM (compat.h): PyTorch's own kernel runs, two buffers.
        pytest.skip(f"the lean kernel is built for 1.13 on x86-64 only (torch "
                    f"{torch.__version__}): its bits matched, its peak is PyTorch's")
    rise, result = map(int, under.stdout.splitlines()[-1].split()[1:])
    # One grad_input (plus grad_weight and grad_bias, 512 bytes, and allocator rounding):
    # PyTorch's kernel would rise by two.
    assert result == 16 << 20
    assert rise < result + (1 << 20), under.stdout
