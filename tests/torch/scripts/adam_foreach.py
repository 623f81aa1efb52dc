"""An MLP (Linear + LayerNorm + GELU + Dropout blocks) trained for a few steps with Adam or
AdamW (--opt, default adamw), both with foreach=True, on random data. Knows nothing of dtr.

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
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--opt", choices=["adam", "adamw"], default="adamw")
    args = parser.parse_args()

    torch.manual_seed(0)
    layers = [nn.Linear(512, args.width)]
    for _ in range(3):
        layers += [nn.LayerNorm(args.width), nn.GELU(), nn.Dropout(0.1),
                   nn.Linear(args.width, args.width)]
    layers += [nn.GELU(), nn.Linear(args.width, 10)]
    model = nn.Sequential(*layers)
    if args.opt == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2, foreach=True)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            x = torch.randn(args.batch, 512)
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
