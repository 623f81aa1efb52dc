"""Training-loop patterns users write around a model, each on a 6-layer tanh MLP (512
wide, batch 1024) trained for a few SGD steps on random data. Knows nothing of dtr.

--pattern:
  grad_penalty  a gradient penalty (WGAN-GP style): torch.autograd.grad with
                create_graph=True, then backward through that gradient (double backward)
  jit           the model compiled with torch.jit.script
  hooks         a hook on every parameter's gradient, in-place edits of the input batch
                (x[:, 0] += 1, masked_fill_), and an evaluation under torch.no_grad() in
                eval mode after each step
  checkpoint    torch.utils.checkpoint (use_reentrant=False) around each layer
  accumulate    gradients accumulated over 4 micro-batches before the step
  amp           mixed precision: the forward pass and the loss under
                torch.autocast("cpu", dtype=torch.bfloat16)
  clip          zero_grad(set_to_none=True), clip_grad_norm_ before each step and a
                StepLR schedule
  save          SGD with momentum, and a checkpoint (torch.save of the model's and the
                optimizer's state_dict) after each step, whose sha256 is printed
  ema           an exponential moving average of the weights (a copy.deepcopy of the
                model, updated in place under torch.no_grad() after each step and
                evaluated on the batch), and a "best weights" copy.deepcopy of the
                state_dict after each step
  reload        SGD with momentum; the model's and optimizer's state saved with torch.save
                after step 0 and loaded back (load_state_dict) after step 1, as when a
                run resumes from a checkpoint
  two_losses    two losses on one forward pass, each with its own backward (the first
                with retain_graph=True), their gradients summed in .grad, as multi-task
                training and auxiliary losses do
  noise         noise drawn inside the step and added to the input (torch.randn in grad
                mode, as a denoising objective draws it)
  reparam       a VAE's reparameterisation: a scale from the first layer, std = exp(...),
                z = x + torch.randn_like(std) * std fed to the model, and a KL-style term
                on std added to the loss
  gan           a GAN: the model is the discriminator (its first output the logit), a
                2-layer generator makes fakes from noise drawn in grad mode; each step
                trains the discriminator on real and detached fake batches, then the
                generator through the discriminator, each with its own Adam optimizer

Prints one line per step, `loss <step> <float32 bit pattern in hex> <value>` (and `loss
gen<step> <bits> <value>` for the generator's loss of gan, `loss eval<step> <bits>
<value>` for the evaluation of hooks, `loss norm<step> <bits> <value>` for the gradient
norm of clip, `loss save<step> <sha256 prefix> <bytes>` for the checkpoint of save, `loss
ema<step> <bits> <value>` for the average model of ema), and at the end `param <name>
<sha256 of the parameter's raw bytes>` (ema: the average's and the last copy's too; gan:
the generator's too), so two runs can be compared bit for bit.
"""
import argparse
import copy
import hashlib
import io
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as checkpoint

PATTERNS = ("grad_penalty", "jit", "hooks", "checkpoint", "accumulate", "amp", "clip", "save",
            "ema", "reload", "two_losses", "noise", "reparam", "gan")


class MLP(nn.Module):
    def __init__(self, width, depth, use_checkpoint):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 10)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        for layer in self.layers:
            if self.use_checkpoint:
                x = checkpoint.checkpoint(lambda t, l=layer: torch.tanh(l(t)), x,
                                          use_reentrant=False)
            else:
                x = torch.tanh(layer(x))
        return self.head(x)


def bits(value):
    return struct.pack("<f", float(value)).hex()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pattern", required=True, choices=PATTERNS)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = MLP(512, 6, args.pattern == "checkpoint")
    if args.pattern == "jit":
        model = torch.jit.script(nn.Sequential(*[m for l in model.layers for m in (l, nn.Tanh())],
                                               model.head))
    if args.pattern == "hooks":
        for p in model.parameters():
            p.register_hook(lambda g: g * 0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05,
                          momentum=0.9 if args.pattern in ("save", "reload") else 0.0)
    gen = None
    if args.pattern == "gan":
        gen = nn.Sequential(nn.Linear(128, 512), nn.Tanh(), nn.Linear(512, 512))
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.5, 0.999))
        gen_opt = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.5, 0.999))
    average = copy.deepcopy(model) if args.pattern == "ema" else None
    best = None
    saved = None
    if args.pattern == "clip":
        schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    def batch():
        with torch.no_grad():  # data, as a loader's batch: drawn outside autograd
            return torch.randn(args.batch, 512), torch.randint(0, 10, (args.batch,))

    for step in range(args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=args.pattern == "clip")
        if args.pattern == "accumulate":
            loss = torch.zeros(())
            for _ in range(4):
                x, y = batch()
                part = F.cross_entropy(model(x), y) / 4
                part.backward()
                loss += part.detach()
        else:
            x, y = batch()
            if args.pattern == "hooks":
                x[:, 0] += 1.0
                x.masked_fill_(x > 3.0, 3.0)
            if args.pattern == "grad_penalty":
                x.requires_grad_()
                out = model(x)
                grad, = torch.autograd.grad(out.sum(), x, create_graph=True)
                loss = F.cross_entropy(out, y) + 0.1 * (grad.norm(2, dim=1) - 1).pow(2).mean()
            elif args.pattern == "two_losses":
                out = model(x)
                loss = F.cross_entropy(out, y)
                loss.backward(retain_graph=True)
                aux = 0.01 * out.pow(2).mean()
                aux.backward()
                print(f"loss aux{step} {bits(aux)} {float(aux):.6f}", flush=True)
            elif args.pattern == "noise":
                loss = F.cross_entropy(model(x + 0.1 * torch.randn(x.shape)), y)
            elif args.pattern == "reparam":
                std = torch.exp(0.5 * model.layers[0](x).clamp(-4.0, 4.0))
                z = x + torch.randn_like(std) * std
                kl = 0.5 * (std.pow(2) - 2.0 * std.log() - 1.0).mean()
                loss = F.cross_entropy(model(z), y) + 0.01 * kl
            elif args.pattern == "gan":
                fake = gen(torch.randn(args.batch, 128))
                real = model(x)[:, 0]
                judged = model(fake.detach())[:, 0]
                loss = (F.binary_cross_entropy_with_logits(real, torch.ones_like(real))
                        + F.binary_cross_entropy_with_logits(judged, torch.zeros_like(judged)))
            elif args.pattern == "amp":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(x), y)
            else:
                loss = F.cross_entropy(model(x), y)
            if args.pattern != "two_losses":
                loss.backward()
        if args.pattern == "clip":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            print(f"loss norm{step} {bits(norm)} {float(norm):.6f}", flush=True)
        opt.step()
        if args.pattern == "gan":
            gen_opt.zero_grad()
            judged = model(fake)[:, 0]
            gen_loss = F.binary_cross_entropy_with_logits(judged, torch.ones_like(judged))
            gen_loss.backward()
            gen_opt.step()
            print(f"loss gen{step} {bits(gen_loss)} {float(gen_loss):.6f}", flush=True)
        if args.pattern == "clip":
            schedule.step()
        if args.pattern == "save":
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
            digest = hashlib.sha256(buffer.getvalue()).hexdigest()[:16]
            print(f"loss save{step} {digest} {len(buffer.getvalue())}", flush=True)
        if args.pattern == "ema":
            with torch.no_grad():
                for pa, pm in zip(average.parameters(), model.parameters()):
                    pa.mul_(0.9).add_(pm, alpha=0.1)
                value = F.cross_entropy(average(x), y)
            print(f"loss ema{step} {bits(value)} {float(value):.6f}", flush=True)
            best = copy.deepcopy(model.state_dict())
        if args.pattern == "reload" and step == 0:
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
            saved = buffer.getvalue()
        if args.pattern == "reload" and step == 1:
            state = torch.load(io.BytesIO(saved))
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
        print(f"loss {step} {bits(loss)} {float(loss):.6f}", flush=True)
        if args.pattern == "hooks":
            model.eval()
            with torch.no_grad():
                x, y = batch()
                value = F.cross_entropy(model(x), y)
                print(f"loss eval{step} {bits(value)} {float(value):.6f}", flush=True)
            model.train()
        print(f"time {step} {time.perf_counter() - start:.4f}", flush=True)
    tensors = list(model.named_parameters())
    if gen is not None:
        tensors += [("gen." + n, p) for n, p in gen.named_parameters()]
    if average is not None:
        tensors += [("average." + n, p) for n, p in average.named_parameters()]
        tensors += [("best." + n, t) for n, t in best.items()]
    for name, p in tensors:
        digest = hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()
        print(f"param {name} {digest}", flush=True)


if __name__ == "__main__":
    main()
