"""A small MLP trained for a few SGD steps on random data. Knows nothing of dtr.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>`, so two runs can be compared
bit for bit.
"""
import argparse
import hashlib
import struct

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=2, help="hidden width x width layers")
    parser.add_argument("--residual", action="store_true",
                        help="each hidden layer adds its input back: h + tanh(linear(h))")
    args = parser.parse_args()

    torch.manual_seed(0)

    class Residual(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.linear = nn.Linear(width, width)

        def forward(self, h):
            return h + torch.tanh(self.linear(h))

    layers = [nn.Linear(256, args.width), nn.ReLU()]
    for _ in range(args.depth):
        layers += ([Residual(args.width)] if args.residual else
                   [nn.Linear(args.width, args.width), nn.ReLU()])
    model = nn.Sequential(*layers, nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            x = torch.randn(args.batch, 256)
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
