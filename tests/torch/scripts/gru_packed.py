"""A bidirectional 2-layer nn.GRU classifier over variable-length sequences, fed through
nn.utils.rnn.pack_padded_sequence (enforce_sorted=False) and unpacked with
pad_packed_sequence; masked mean pooling plus the last hidden states -> Linear; Adam (or
SGD, `--optimizer sgd`) and clip_grad_norm_. Knows nothing of dtr.

Prints `loss <step> <float32 bit pattern in hex> <value>` per step and `param <name>
<sha256 of the parameter's raw bytes>` at the end, so two runs can be compared bit for bit.
"""
import argparse
import hashlib
import struct
import time

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class Net(nn.Module):
    def __init__(self, vocab, embed, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed, padding_idx=0)
        self.gru = nn.GRU(embed, hidden, num_layers=2, bidirectional=True, batch_first=True,
                          dropout=0.1)
        self.head = nn.Linear(2 * hidden, 10)

    def forward(self, tokens, lengths):
        x = self.embed(tokens)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        mask = (torch.arange(tokens.shape[1])[None, :] < lengths[:, None]).unsqueeze(-1)
        pooled = (out * mask).sum(1) / lengths[:, None].float()
        return self.head(pooled + h[-2:].transpose(0, 1).reshape(tokens.shape[0], -1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=48)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=192)
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Net(args.vocab, 96, args.hidden)
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(args.steps):
        start = time.perf_counter()
        with torch.no_grad():
            lengths = torch.randint(1, args.seq + 1, (args.batch,))
            tokens = torch.randint(1, args.vocab, (args.batch, args.seq))
            tokens[torch.arange(args.seq)[None, :] >= lengths[:, None]] = 0
            y = torch.randint(0, 10, (args.batch,))
        opt.zero_grad()
        loss = loss_fn(model(tokens, lengths), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = loss.item()
        print(f"loss {step} {struct.pack('<f', value).hex()} {value:.6f}", flush=True)
        print(f"time {step} {time.perf_counter() - start:.4f}", flush=True)
    for name, p in model.named_parameters():
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
