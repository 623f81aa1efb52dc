"""A 2-process DistributedDataParallel run (gloo, loopback) of a small CNN, one process per
rank, started like torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment). Knows nothing of dtr. Each rank prints its losses and, at the end, a sha256
per parameter and buffer, as mlp.py does.
"""
import argparse
import hashlib
import os
import struct

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=48)
    args = parser.parse_args()

    dist.init_process_group("gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of data
    for step in range(args.steps):
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            x = torch.randn(args.batch, 3, args.size, args.size, generator=gen)
            y = torch.randint(0, 10, (args.batch,), generator=gen)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        print(f"loss {step} {struct.pack('<f', value).hex()} {value:.6f}", flush=True)
    for name, p in model.named_parameters():
        print(f"param {name} {hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()}")
    for name, b in model.named_buffers():
        print(f"buffer {name} {hashlib.sha256(b.detach().contiguous().numpy().tobytes()).hexdigest()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
