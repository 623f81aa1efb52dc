"""torchvision's ops under a budget (Note [Pure foreign ops] in
integration/torch/dispatch_hook.cpp). Ops outside aten are opaque, but torchvision's RoI
ops, deform_conv2d and nms are functions of their inputs and are recorded like aten's, so
their results can be evicted and made again. Before, scripts/detection.py (Faster R-CNN)
ran out of memory at 0.6 of its peak with its RoI features pinned. Its cases in
test_remat.py train it bit-identically; here, the premise, and that a trace records the
ops."""
import torch
import torchvision  # noqa: F401  (registers torch.ops.torchvision)

from conftest import trains_bit_identically

OPS = torch.ops.torchvision


def bits(t):
    return t.contiguous().view(torch.uint8) if t.is_floating_point() else t.contiguous()


def same(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride() and
        torch.equal(bits(x), bits(y)) for x, y in zip(a, b))


def test_the_recorded_torchvision_ops_give_the_same_bits_twice():
    """The premise: on two threads, each op of the table, called twice on the same
    inputs, returns the same bits (a remat calls it again). RoIs overlap, so the backward
    ops accumulate several RoIs into one gradient element."""
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 98, 40, 40, generator=g)  # 98 = 2 x 7 x 7 channels for the ps_ ops
    corner = torch.rand(256, 2, generator=g) * 28
    boxes = torch.cat([corner, corner + torch.rand(256, 2, generator=g) * 12 + 1], 1)
    rois = torch.cat([torch.randint(0, 2, (256, 1), generator=g).float(), boxes], 1)
    deform = (x[:, :16, :24, :24].contiguous(), torch.randn(32, 16, 3, 3, generator=g),
              torch.randn(2, 18, 24, 24, generator=g) * 2, torch.rand(2, 9, 24, 24, generator=g),
              torch.randn(32, generator=g))  # input, weight, offset, mask, bias
    calls = {
        "roi_align": lambda: OPS.roi_align(x, rois, 0.5, 7, 7, 2, True),
        "roi_pool": lambda: OPS.roi_pool(x, rois, 0.5, 7, 7),
        "ps_roi_align": lambda: OPS.ps_roi_align(x, rois, 0.5, 7, 7, 2),
        "ps_roi_pool": lambda: OPS.ps_roi_pool(x, rois, 0.5, 7, 7),
        "nms": lambda: OPS.nms(boxes, torch.rand(256, generator=g.manual_seed(3)), 0.5),
        "deform_conv2d": lambda: OPS.deform_conv2d(*deform, 1, 1, 1, 1, 1, 1, 1, 1, True),
    }
    out = {name: call() for name, call in calls.items()}
    grad = torch.randn(256, 98, 7, 7, generator=g)
    grad_ps = torch.randn(256, 2, 7, 7, generator=g)
    calls.update({
        "_roi_align_backward": lambda: OPS._roi_align_backward(
            grad, rois, 0.5, 7, 7, 2, 98, 40, 40, 2, True),
        "_roi_pool_backward": lambda: OPS._roi_pool_backward(
            grad, rois, out["roi_pool"][1], 0.5, 7, 7, 2, 98, 40, 40),
        "_ps_roi_align_backward": lambda: OPS._ps_roi_align_backward(
            grad_ps, rois, out["ps_roi_align"][1], 0.5, 7, 7, 2, 2, 98, 40, 40),
        "_ps_roi_pool_backward": lambda: OPS._ps_roi_pool_backward(
            grad_ps, rois, out["ps_roi_pool"][1], 0.5, 7, 7, 2, 98, 40, 40),
        "_deform_conv2d_backward": lambda: OPS._deform_conv2d_backward(
            torch.ones_like(out["deform_conv2d"]), *deform, 1, 1, 1, 1, 1, 1, 1, 1, True),
    })
    for name, call in calls.items():
        first = call()
        for _ in range(3):
            assert same(first, call()), name
    assert out["nms"].numel() > 0


def test_detection_records_the_roi_ops(lib, tmp_path):
    """At 0.6 of its peak scripts/detection.py trains as without the library, and its
    trace records roi_align and its backward as ops. Their results die at once (written
    into the RoI features' zeros tensor, or added into a gradient); what recording them
    changes is that the tensors made from them are no longer pinned through them (Note
    [Dead constants] in lineage.cpp)."""
    trace = tmp_path / "detection.trace"
    trains_bit_identically(lib, ("detection.py", "--steps", "2"), 0.6, DTR_TRACE=str(trace))
    text = trace.read_text()
    assert "torchvision::roi_align" in text and "torchvision::_roi_align_backward" in text
