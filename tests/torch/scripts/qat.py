"""Quantization-aware training (torch.ao.quantization, eager mode, the fbgemm QAT qconfig)
of a small CNN of fused Conv2d + BatchNorm2d + ReLU blocks, with SGD-momentum, on random
3x64x64 images. Knows nothing of dtr.

Every activation and weight passes through FusedMovingAvgObsFakeQuantize. The first step
runs with fake quantization off (observers only, as a calibration step would), the others
with it on; the last one with the observers and the BatchNorm statistics frozen, as a QAT
recipe ends. So each branch of the fused observer's op runs.

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>`, and at the
end `param <name> <sha256>` and `buffer <name> <sha256>` (BatchNorm statistics and each
observer's running min and max, scale and zero point), so two runs can be compared bit for
bit.
"""
import argparse
import hashlib
import struct
import warnings

import torch
import torch.ao.quantization as tq
import torch.nn as nn
import torch.nn.intrinsic.qat as nniqat


class Net(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.quant = tq.QuantStub()
        layers = []
        cin = 3
        for _ in range(depth):
            layers += [nn.Conv2d(cin, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                       nn.ReLU()]
            cin = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, 10)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.features(self.quant(x))
        return self.dequant(self.fc(self.pool(x).flatten(1)))


def digest(t):
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def main():
    # The fbgemm qconfig's observers use reduce_range, which 1.13 warns of at each one.
    warnings.filterwarnings("ignore", message="Please use quant_min and quant_max")
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--depth", type=int, default=6)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Net(args.width, args.depth)
    model.train()
    blocks = [[f"features.{3 * i}", f"features.{3 * i + 1}", f"features.{3 * i + 2}"]
              for i in range(args.depth)]
    model = tq.fuse_modules_qat(model, blocks)
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    tq.prepare_qat(model, inplace=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        if step == 0:
            model.apply(tq.disable_fake_quant)
        elif step == 1:
            model.apply(tq.enable_fake_quant)
        if step == args.steps - 1 and step > 1:
            model.apply(tq.disable_observer)
            model.apply(nniqat.freeze_bn_stats)
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            x = torch.randn(args.batch, 3, args.size, args.size)
            y = torch.randint(0, 10, (args.batch,))
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        print(f"loss {step} {struct.pack('<f', value).hex()} {value:.6f}", flush=True)
    for name, p in model.named_parameters():
        print(f"param {name} {digest(p)}", flush=True)
    for name, b in model.named_buffers():
        print(f"buffer {name} {digest(b)}", flush=True)


if __name__ == "__main__":
    main()
