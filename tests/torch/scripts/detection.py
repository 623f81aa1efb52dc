"""Object detection: torchvision's Faster R-CNN (MobileNetV3-Large FPN backbone, no
pretrained weights, 5 classes, images resized to 320x320) trained for a few SGD-momentum
steps on random images with three random boxes each. Knows nothing of dtr.

Its RoI heads call torchvision's own ops (roi_align through MultiScaleRoIAlign, nms), not
aten's, and write each feature level's RoI features into one zeros tensor (Note [Pure
foreign ops] in integration/torch/dispatch_hook.cpp).

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256>` and `buffer <name> <sha256>` (the frozen BatchNorm statistics),
so two runs can be compared bit for bit.
"""
import argparse
import hashlib
import struct

import torch
import torchvision


def digest(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=320)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=5, min_size=args.size,
        max_size=args.size)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            images = [torch.rand(3, args.size, args.size, generator=data)
                      for _ in range(args.batch)]
            targets = []
            for _ in range(args.batch):
                corner = torch.rand(3, 2, generator=data) * (args.size * 0.6)
                extent = torch.rand(3, 2, generator=data) * (args.size * 0.3) + 10
                targets.append({"boxes": torch.cat([corner, corner + extent], 1),
                                "labels": torch.randint(1, 5, (3,), generator=data)})
        opt.zero_grad()
        loss = sum(model(images, targets).values())
        loss.backward()
        opt.step()
        value = loss.item()
        print(f"loss {step} {struct.pack('<f', value).hex()} {value:.6f}", flush=True)
    for name, p in model.named_parameters():
        print(f"param {name} {digest(p)}", flush=True)
    for name, b in model.named_buffers():
        print(f"buffer {name} {digest(b)}", flush=True)


if __name__ == "__main__":
    main()
