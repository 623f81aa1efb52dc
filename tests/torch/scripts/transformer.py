"""A small causal language model (nn.Embedding + learned positions -> nn.TransformerEncoder
with dropout -> Linear) trained for a few Adam steps on random tokens. Knows nothing of dtr.

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


class LM(nn.Module):
    def __init__(self, vocab, d_model, nhead, layers, ff, seq):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward=ff, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens):
        n = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:n]
        h = self.encoder(h, mask=self.mask[:n, :n])
        return self.head(self.norm(h))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = LM(args.vocab, 128, 4, args.layers, 512, args.seq)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
        start = time.perf_counter()
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        opt.zero_grad()
        logits = model(inputs)
        loss = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        value = loss.item()
        bits = struct.pack("<f", value).hex()
        print(f"loss {step} {bits} {value:.6f}", flush=True)
        print(f"time {step} {time.perf_counter() - start:.4f}", flush=True)
    for name, p in model.named_parameters():
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
