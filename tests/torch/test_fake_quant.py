"""Quantization-aware training under a budget (Note [Observed fake quantization] in
integration/torch/dispatch_hook.cpp). The fused observer and fake quantization,
_fused_moving_avg_obs_fq_helper, writes the observer's state, so it runs once; its results
are recorded as those of the fake quantization alone, which a remat runs. Before, they were
pinned while they lived: scripts/qat.py ran out of memory at 0.3 of its peak with 41 MiB
pinned (and at 0.25). Its cases in test_remat.py train it bit-identically down to its
lowest fraction; here, the premise and what the remats ran."""
import json

import torch

from conftest import TRAINING_PRELUDE, trains_as_without, trains_bit_identically

PER_TENSOR = "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams"


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    view = (lambda t: t) if a.dtype == torch.bool else (lambda t: t.view(torch.uint8))
    return torch.equal(view(a.contiguous()), view(b.contiguous()))


def test_the_fake_quantization_alone_gives_the_fused_ops_bits():
    """The premise, in plain PyTorch: once the helper has run, the op a remat runs returns
    its output and mask, bit for bit and with its strides, for either flag per tensor and
    with fake quantization on per channel; for shapes and memory formats, symmetric or not,
    signed or unsigned ranges, fresh observers (infinite running min and max) or not."""
    torch.manual_seed(0)
    checked = {"per tensor, on": 0, "per tensor, off": 0, "per channel": 0}
    for trial in range(120):
        shape = [(16, 32, 8, 8), (5, 7), (3, 4, 5), (64,)][trial % 4]
        x = torch.randn(*shape) * (1 + trial)
        if trial % 3 == 0 and x.dim() == 4:
            x = x.to(memory_format=torch.channels_last)
        per_row = trial % 5 == 0 and x.dim() >= 2
        n = x.shape[0] if per_row else 1
        fresh = trial % 2 == 1
        running_min = torch.full((n,), float("inf")) if fresh else torch.randn(n) - 3
        running_max = torch.full((n,), float("-inf")) if fresh else torch.randn(n) + 3
        scale, zero_point = torch.ones(n), torch.zeros(n, dtype=torch.int)
        observe = torch.tensor([fresh or trial % 7 != 0], dtype=torch.long)
        fake_quant = torch.tensor([per_row or trial % 6 != 0], dtype=torch.long)
        qmin, qmax = (-128, 127) if trial % 2 else (0, 255)
        out, mask = torch._fused_moving_avg_obs_fq_helper(
            x, observe, fake_quant, running_min, running_max, scale, zero_point, 0.01, qmin,
            qmax, 0, per_row, trial % 4 == 1)
        if per_row:
            again = torch.ops.aten.fake_quantize_per_channel_affine_cachemask(
                x, scale, zero_point, 0, qmin, qmax)
            checked["per channel"] += 1
        else:
            again = torch._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
                x, scale, zero_point, fake_quant, qmin, qmax)
            checked["per tensor, on" if fake_quant.item() else "per tensor, off"] += 1
        assert same_bits(out, again[0]) and same_bits(mask, again[1]), (trial, shape, per_row)
    assert min(checked.values()) > 0, checked


def test_fake_quantized_activations_are_evicted_and_remade(lib, tmp_path):
    """At 0.3 of its peak scripts/qat.py trains as without the library, and its remats
    run the activations' fake quantization."""
    timeline = tmp_path / "qat.json"
    trains_bit_identically(lib, ("qat.py", "--steps", "3"), 0.3, DTR_TIMELINE=str(timeline))
    made = {e["name"] for e in json.loads(timeline.read_text())["traceEvents"]
            if e.get("cat") == "remat"}
    assert PER_TENSOR in made, made


# The weights' fake quantization (per channel): a QAT MLP of 1024-wide layers, whose
# fake-quantized weights and their masks are a third of its peak. Before, they were pinned
# while they lived, and this ran out of memory at 0.9 (42.65 MiB pinned of a 52.10 MiB
# budget). Arguments: the budget as a fraction (0: none) of a peak in bytes.
QAT_MLP = TRAINING_PRELUDE + r"""
import warnings
import torch.ao.quantization as tq
warnings.filterwarnings("ignore", message="Please use quant_min and quant_max")
model = nn.Sequential(tq.QuantStub(), *[m for _ in range(4) for m in (nn.Linear(1024, 1024),
                      nn.ReLU())], nn.Linear(1024, 10), tq.DeQuantStub())
model.train()
model.qconfig = tq.get_default_qat_qconfig("fbgemm")
tq.prepare_qat(model, inplace=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
apply_budget()
for step in range(3):
    with torch.no_grad():
        x = torch.randn(64, 1024)
        y = torch.randint(0, 10, (64,))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    record(loss)
finish(model)
"""


def test_fake_quantized_weights_are_not_pinned(lib):
    trains_as_without(QAT_MLP, lib, (0.8,))
