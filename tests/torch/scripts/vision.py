"""A torchvision classifier (--model: resnet18 by default, resnet50, densenet121,
mobilenet_v2, ...; weights=None, 10 classes) trained for a few SGD steps on random
3x128x128 images (--size). Knows nothing of dtr.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>` and `buffer <name> <sha256>` (the
BatchNorm running statistics), so two runs can be compared bit for bit.
"""
import argparse
import hashlib
import struct
import time

import torch
import torch.nn as nn
import torchvision


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
        start = time.perf_counter()
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            x = torch.randn(args.batch, 3, args.size, args.size)
            y = torch.randint(0, 10, (args.batch,))
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        bits = struct.pack("<f", value).hex()
        print(f"loss {step} {bits} {value:.6f}", flush=True)
        print(f"time {step} {time.perf_counter() - start:.4f}", flush=True)
    for name, p in model.named_parameters():
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)
    for name, b in model.named_buffers():
        digest = hashlib.sha256(b.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"buffer {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
