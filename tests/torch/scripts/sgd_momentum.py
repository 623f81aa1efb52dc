"""A small CNN (no normalization) trained for a few steps with SGD, momentum 0.9 and weight
decay 1e-4, on random 3x64x64 images. Knows nothing of dtr.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>`, so two runs can be compared bit
for bit.
"""
import argparse
import hashlib
import struct

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    def block(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU()]

    # Deep and narrow: twelve 16-channel convolutions, so the activations kept for the
    # backward pass outweigh any one op's working set.
    layers = block(3, 16)
    for _ in range(11):
        layers += block(16, 16)
    model = nn.Sequential(
        *layers,
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
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


if __name__ == "__main__":
    main()
