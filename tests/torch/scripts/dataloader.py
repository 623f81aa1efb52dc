"""A small CNN trained for a few SGD steps from a torch.utils.data.DataLoader with two
worker processes over a synthetic in-memory Dataset (made once, from a fixed generator, in
the Dataset's __init__; shuffle=False). Knows nothing of dtr.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>` and `buffer <name> <sha256>` (the
BatchNorm running statistics), so two runs can be compared bit for bit.
"""
import argparse
import hashlib
import struct

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class RandomImages(Dataset):
    def __init__(self, count, size):
        g = torch.Generator().manual_seed(1234)
        with torch.no_grad():  # data, as read from disk: drawn outside autograd
            self.images = torch.randn(count, 3, size, size, generator=g)
            self.labels = torch.randint(0, 10, (count,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        # A small per-sample transform, done in the worker.
        return self.images[index] * 0.5 + 0.1, self.labels[index]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=48)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = RandomImages(8 * args.batch, args.size)
    loader = DataLoader(data, batch_size=args.batch, shuffle=False,
                        num_workers=args.workers, drop_last=True)
    def block(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]

    model = nn.Sequential(
        *block(3, 32), *block(32, 32), *block(32, 32), *block(32, 32),
        nn.MaxPool2d(2),
        *block(32, 64), *block(64, 64), *block(64, 64),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    step = 0
    while step < args.steps:
        for x, y in loader:
            if step >= args.steps:
                break
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            value = loss.item()
            bits = struct.pack("<f", value).hex()
            print(f"loss {step} {bits} {value:.6f}", flush=True)
            step += 1
    for name, p in model.named_parameters():
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)
    for name, b in model.named_buffers():
        digest = hashlib.sha256(b.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"buffer {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
