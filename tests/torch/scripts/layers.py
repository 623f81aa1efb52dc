"""Less common layers and ops, trained for a few Adam steps on random data. Knows nothing
of dtr. --model picks one of:

  unet      an encoder-decoder on 64x64 images (batch 16): Conv2d, GroupNorm, PReLU,
            InstanceNorm2d with running statistics, max-pool, ConvTranspose2d, skip
            connections by cat, PixelShuffle, bilinear interpolate; MSE plus a KL term
  bag       a bag-of-words classifier (4096 bags of 20-99 tokens): EmbeddingBag (mean,
            with offsets), cumsum, scatter_add, masked_select and nonzero (sizes that
            depend on the data), unique, index_put, log_softmax and a weighted nll_loss
  ctc       a small speech model (batch 32, 200 frames): Conv1d, a GRU, log_softmax over
            time and CTC loss with variable target lengths

--batch overrides the model's batch (images, bags or utterances).

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256 of the parameter's raw bytes>` and `buffer <name> <sha256>`, so
two runs can be compared bit for bit.
"""
import argparse
import hashlib
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


def block(cin, cout, norm):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), norm(cout), nn.PReLU(cout),
                         nn.Conv2d(cout, cout, 3, padding=1), norm(cout), nn.PReLU())


class UNet(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        group = lambda ch: nn.GroupNorm(4, ch)  # noqa: E731
        inst = lambda ch: nn.InstanceNorm2d(ch, affine=True, track_running_stats=True)  # noqa: E731
        self.enc1 = block(3, c, group)
        self.enc2 = block(c, 2 * c, inst)
        self.enc3 = block(2 * c, 4 * c, group)
        self.up3 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = block(4 * c, 2 * c, inst)
        self.up2 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec1 = block(2 * c, c, group)
        self.head = nn.Sequential(nn.Conv2d(c, 4 * 3, 3, padding=1), nn.PixelShuffle(2))

    def forward(self, x):
        a = self.enc1(x)
        b = self.enc2(F.max_pool2d(a, 2))
        code = self.enc3(F.max_pool2d(b, 2))
        d = self.dec2(torch.cat([b, self.up3(code)], dim=1))  # skip connections by cat
        d = self.dec1(torch.cat([a, self.up2(d)], dim=1))
        y = self.head(d)  # twice the size: PixelShuffle
        return F.interpolate(y, scale_factor=0.5, mode="bilinear", align_corners=False), code


class Bag(nn.Module):
    def __init__(self, vocab=5000, dim=128, width=1024, classes=20):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.hidden = nn.Linear(2 * dim, width)
        self.deep = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU())
                                    for _ in range(3)])
        self.out = nn.Linear(width, classes)

    def forward(self, tokens, offsets, weights):
        e = self.bag(tokens, offsets)
        # a running sum over the batch and a scatter of token weights into the vocabulary
        c = torch.cumsum(e, dim=0) / torch.arange(1, e.shape[0] + 1).unsqueeze(1)
        h = self.deep(torch.relu(self.hidden(torch.cat([e, c], dim=1))))
        vocab_mass = torch.zeros(self.bag.num_embeddings).scatter_add(0, tokens, weights)
        present = vocab_mass.nonzero().squeeze(1)  # data-dependent size
        strong = torch.masked_select(e, e > e.mean())  # data-dependent size
        reg = strong.square().mean() + self.bag.weight[present].square().mean()
        return F.log_softmax(self.out(h), dim=1), reg


class Speech(nn.Module):
    def __init__(self, feats=40, hidden=256, classes=30):
        super().__init__()
        self.conv = nn.Conv1d(feats, hidden, 5, padding=2)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):  # x: batch x feats x time
        h = torch.relu(self.conv(x)).transpose(1, 2)
        h, _ = self.rnn(h)
        return F.log_softmax(self.out(h), dim=2).transpose(0, 1)  # time x batch x classes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="unet", choices=("unet", "bag", "ctc"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0, help="0: the model's own")
    args = parser.parse_args()

    batch = args.batch or {"unet": 16, "bag": 4096, "ctc": 32}[args.model]
    torch.manual_seed(0)
    model = {"unet": UNet, "bag": Bag, "ctc": Speech}[args.model]()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for step in range(args.steps):
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            if args.model == "unet":
                x = torch.randn(batch, 3, 64, 64)
            elif args.model == "bag":
                lengths = torch.randint(20, 100, (batch,))
                offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
                tokens = torch.randint(0, 5000, (int(lengths.sum()),))
                weights = torch.rand(tokens.shape[0])
                labels = torch.randint(0, 20, (batch,))
            else:
                x = torch.randn(batch, 40, 200)
                target_lengths = torch.randint(10, 30, (batch,))
                targets = torch.randint(1, 30, (int(target_lengths.sum()),))
        opt.zero_grad()
        if args.model == "unet":
            y, code = model(x)
            log_q = F.log_softmax(code.flatten(1), dim=1)
            prior = torch.full_like(log_q, 1.0 / log_q.shape[1])
            loss = F.mse_loss(y, x) + 0.1 * F.kl_div(log_q, prior, reduction="batchmean")
        elif args.model == "bag":
            # unique over the batch's labels: the classes present, weighted equally
            classes, counts = torch.unique(labels, return_counts=True)
            class_weight = torch.zeros(20).index_put((classes,), 1.0 / counts.float())
            log_p, reg = model(tokens, offsets, weights)
            loss = F.nll_loss(log_p, labels, weight=class_weight) + 0.01 * reg
        else:
            log_p = model(x)
            input_lengths = torch.full((batch,), log_p.shape[0], dtype=torch.long)
            loss = F.ctc_loss(log_p, targets, input_lengths, target_lengths)
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
