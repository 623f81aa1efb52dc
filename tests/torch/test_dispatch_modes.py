"""Ops run through a TorchDispatchMode (Note [Dispatch modes] in
integration/torch/dispatch_hook.cpp) are not recorded, and their inputs are refilled,
views included. Before, a mode that rounded each result trained to other parameters under
a budget (a remat ran the kernel, not the mode), the same mode in a longer loop aborted,
and a mode that read each result (a NaN checker) died on a null data pointer. A run with
such a mode now gives the bits of the run without dtr, or PyTorch's out-of-memory error;
steps outside the mode still evict."""
import re

import pytest

from conftest import PYTHON, clean_env, last_json, run

# An MLP of 6 layers trained 4 steps. The steps in argv[4] run their forward and backward
# under the mode; those in argv[5] then evaluate a quarter batch under it, in no_grad.
# argv[1]: what the mode does with each result.
SCRIPT = r"""
import hashlib, json, struct, sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
try:
    import dtr
except ImportError:
    dtr = None
kind, fraction, peak = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
mode_steps = [int(s) for s in sys.argv[4].split(",") if s]
eval_steps = [int(s) for s in sys.argv[5].split(",") if s]
aten = torch.ops.aten
VIEWS = (aten.detach.default, aten.t.default, aten.view.default, aten._unsafe_view.default,
         aten.expand.default, aten.transpose.int)
class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            if kind == "round" and func not in VIEWS and out._base is None:
                out = out.to(torch.bfloat16).to(out.dtype)
            elif kind == "nancheck" and torch.isnan(out).any():
                raise RuntimeError(f"NaN in {func}")
        return out
torch.manual_seed(0)
with torch.no_grad():
    ws = [(torch.randn(256, 256) / 16).requires_grad_() for _ in range(6)]
opt = torch.optim.SGD(ws, lr=0.1)
if dtr is not None and dtr.is_enabled() and fraction > 0:
    dtr.set_budget(int(fraction * peak))
out = {"losses": [], "evals": []}
try:
    for step in range(4):
        opt.zero_grad()
        with torch.no_grad():
            x = torch.randn(4096, 256)
        mode = Mode() if step in mode_steps else None
        if mode: mode.__enter__()
        h = x
        for w in ws:
            h = torch.tanh(h @ w)
        loss = h.pow(2).mean()
        loss.backward()
        if mode: mode.__exit__(None, None, None)
        del h
        opt.step()
        out["losses"].append(struct.pack("<f", loss.item()).hex())
        if step in eval_steps:
            with torch.no_grad(), Mode():
                e = x[:1024]
                for w in ws:
                    e = torch.tanh(e @ w)
                out["evals"].append(struct.pack("<f", e.sum().item()).hex())
    out["params"] = hashlib.sha256(b"".join(w.detach().numpy().tobytes() for w in ws)).hexdigest()
except torch.cuda.OutOfMemoryError as e:
    out["oom"] = str(e)
if dtr is not None and dtr.is_enabled():
    s = dtr.memory_stats()
    out.update(peak=s["allocated_bytes.all.peak"], evictions=s["dtr.num_evictions"])
print(json.dumps(out))
"""


def go(lib, kind, fraction, peak, mode_steps, eval_steps="", conf=None):
    args = [PYTHON, "-c", SCRIPT, kind, str(fraction), str(peak), mode_steps, eval_steps]
    env = clean_env(LD_PRELOAD=lib, DTR_CONF=conf) if lib else clean_env()
    proc = run(args, env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return last_json(proc)


@pytest.mark.parametrize("kind", ["round", "nancheck"])
def test_a_dispatch_mode_gives_its_own_bits_or_a_clean_out_of_memory_error(lib, kind):
    # Training outside the mode, evaluating under it after steps 1 and 2: the training
    # evicts and gives the bits of the run without dtr, and so do the evaluations.
    plain = go(None, kind, 0, 0, "", "1,2")
    peak = go(lib, kind, 0, 0, "", "1,2", conf="remat:False")["peak"]
    for fraction in (0.7, 0.6):  # 0.55 runs out of memory, with or without the mode
        under = go(lib, kind, fraction, peak, "", "1,2")
        assert under["evictions"] > 0 and "oom" not in under, under
        assert under["peak"] <= int(fraction * peak), under
        for key in ("losses", "params", "evals"):
            assert under[key] == plain[key], (key, under)
    # Steps 1 and 2 train under the mode: nothing it makes is evictable, so no budget under
    # the peak fits here (out of memory at 0.9 and at the peak itself, with 46 MiB
    # untracked); the run must end in PyTorch's out-of-memory error, not in other bits or
    # a crash, and steps before the mode still evict.
    plain = go(None, kind, 0, 0, "1,2")
    peak = go(lib, kind, 0, 0, "1,2", conf="remat:False")["peak"]
    for fraction in (0.85, 0.7):
        under = go(lib, kind, fraction, peak, "1,2")
        assert under["evictions"] > 0, under
        if "oom" in under:
            assert "TorchDispatchMode" in under["oom"], under
            assert under["losses"] == plain["losses"][:len(under["losses"])], under
        else:
            assert (under["losses"], under["params"]) == (plain["losses"], plain["params"])


# A convolution and a BatchNorm under a mode that counts every op it sees and rounds
# native_batch_norm_backward's results to bfloat16 precision; 3 SGD steps.
BATCH_NORM = r"""
import collections, hashlib, json, struct, torch
from torch.utils._python_dispatch import TorchDispatchMode
seen = collections.Counter()
class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        seen[str(func)] += 1
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.native_batch_norm_backward.default:
            out = tuple(o.to(torch.bfloat16).to(o.dtype) if isinstance(o, torch.Tensor) else o
                        for o in out)
        return out
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                        torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
with torch.no_grad():
    x = torch.randn(16, 3, 16, 16)
    y = torch.randint(0, 10, (16,))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
losses = []
for step in range(3):
    opt.zero_grad()
    with Mode():
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
    opt.step()
    losses.append(struct.pack("<f", loss.item()).hex())
print(json.dumps({"losses": losses, "seen": dict(seen), "params": hashlib.sha256(
    b"".join(t.detach().numpy().tobytes() for t in m.state_dict().values())).hexdigest()}))
"""


def test_a_mode_sees_native_batch_norm_backward_itself(lib):
    """Note [Dispatch modes]: the fallback's own batch-norm backward kernel (Note [Lean
    batch-norm backward]) never runs for an op under a mode. Before, the mode saw that
    kernel's empty, empty_like and zeros instead of native_batch_norm_backward, so this
    script trained to other parameters with the library loaded, without any budget."""
    plain = last_json(run([PYTHON, "-c", BATCH_NORM], clean_env()))
    assert plain["seen"]["aten.native_batch_norm_backward.default"] == 3, plain["seen"]
    under = last_json(run([PYTHON, "-c", BATCH_NORM], clean_env(LD_PRELOAD=lib)))
    assert under["seen"] == plain["seen"]
    assert (under["losses"], under["params"]) == (plain["losses"], plain["params"])
