"""An LSTM language model (nn.Embedding -> nn.LSTM with dropout, --layers of them, 2 by
default, called once per sequence or once per --chunks slice of it -> Linear) trained for
a few SGD steps (with gradient clipping) on random tokens, cross entropy over the next
token. Knows nothing of dtr.

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


class LSTMLM(nn.Module):
    def __init__(self, vocab, embed, hidden, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.drop = nn.Dropout(0.2)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, dropout=0.2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, chunks=1):
        # chunks > 1: nn.LSTM is called on one slice of the sequence at a time, the state
        # carried over (and the gradient through it), as a loop over windows does.
        x = self.drop(self.embed(tokens))
        state, outs = None, []
        for part in (x,) if chunks == 1 else x.chunk(chunks, dim=1):
            h, state = self.lstm(part, state)
            outs.append(h)
        h = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        return self.head(self.drop(h))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=1, help="nn.LSTM calls per sequence")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = LSTMLM(args.vocab, 128, args.hidden, args.layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
        start = time.perf_counter()
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        opt.zero_grad()
        logits = model(inputs, args.chunks)
        loss = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
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
