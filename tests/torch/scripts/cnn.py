"""A small CNN (Conv2d + BatchNorm2d + in-place ReLU + Dropout; three stages of --depth
blocks) trained for a few SGD steps on random 3x64x64 images. Knows nothing of dtr.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>` and `buffer <name> <sha256>` (the
BatchNorm running statistics), so two runs can be compared bit for bit.
"""
import argparse
import hashlib
import struct

import torch
import torch.nn as nn


def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2, help="blocks per stage (>= 2)")
    args = parser.parse_args()

    torch.manual_seed(0)
    more = args.depth - 2
    model = nn.Sequential(
        block(3, 32), *[block(32, 32) for _ in range(1 + more)], nn.MaxPool2d(2),
        block(32, 64), *[block(64, 64) for _ in range(1 + more)], nn.MaxPool2d(2),
        block(64, 128), nn.Dropout(0.2), *[block(128, 128) for _ in range(1 + more)],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Dropout(0.5), nn.Linear(128, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
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
    for name, p in model.named_parameters():
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)
    for name, b in model.named_buffers():
        digest = hashlib.sha256(b.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"buffer {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
