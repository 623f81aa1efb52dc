"""A bag-of-words classifier with a sparse embedding (nn.Embedding(sparse=True): its
gradient is a sparse tensor) trained for a few steps: SparseAdam for the embedding, SGD
for the rest (a per-token tanh MLP, then the mean over the sequence), on random tokens.
Knows nothing of dtr.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>`, so two runs can be compared bit
for bit.
"""
import argparse
import hashlib
import struct
import time

import torch
import torch.nn as nn


class BagOfWords(nn.Module):
    def __init__(self, vocab, embed, hidden, depth, classes):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed, sparse=True)
        layers = [nn.Linear(embed, hidden)]
        for _ in range(depth):
            layers += [nn.Tanh(), nn.Linear(hidden, hidden)]
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        return self.head(self.mlp(self.embed(tokens)).mean(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=100)
    parser.add_argument("--vocab", type=int, default=5000)
    parser.add_argument("--depth", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = BagOfWords(args.vocab, 64, 256, args.depth, 10)
    sparse_opt = torch.optim.SparseAdam(list(model.embed.parameters()), lr=0.01)
    dense_params = list(model.mlp.parameters()) + list(model.head.parameters())
    dense_opt = torch.optim.SGD(dense_params, lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        start = time.perf_counter()
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq))
            labels = torch.randint(0, 10, (args.batch,))
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = loss_fn(model(tokens), labels)
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        value = loss.item()
        bits = struct.pack("<f", value).hex()
        print(f"loss {step} {bits} {value:.6f}", flush=True)
        print(f"time {step} {time.perf_counter() - start:.4f}", flush=True)
    for name, p in model.named_parameters():
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
