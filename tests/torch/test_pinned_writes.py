"""A pinned storage that lineage read is written (a parameter at the optimizer step): the
live storages computed from it are refilled and pinned first (Note [Pinned writes] in
integration/torch/lineage.cpp), smallest first, since each one pinned holds its bytes
while the next is rematerialized. Refilled largest first, a big descendant held the room a
small one's chain needed (the LSTM LM at 0.5x with policy dtr_eq: its 15.6 MiB logits
pinned, then the gradients' chain through three more storages of that size ran out)."""
from conftest import TRAINING_PRELUDE, stats_of, trains_as_without

# big: 8 MiB made from p in one op. small: 32 KiB made from p through an 8 MiB
# intermediate that is dead. Both are evicted, then p is written in place. Room: 9.5 MiB
# besides p, so small's chain (8 MiB + 32 KiB) fits only while big is not yet refilled.
WRITE = r"""
import json, torch, dtr
MiB = 1 << 20
torch.manual_seed(0)
with torch.no_grad():                     # a draw outside autograd is opaque
    p = torch.randn(MiB // 4)             # 1 MiB, random: pinned (Note [Seeded factories])
big = p.expand(8, -1) * 2.0               # 8 MiB, made from p at once
small = (p.expand(8, -1) * 1.5)[0, :8192].clone()  # 32 KiB, through a dead 8 MiB one
with dtr.disable():  # copies made outside lineage: exporting big itself would pin it
    ref_big, ref_small = big.clone().numpy().copy(), small.clone().numpy().copy()
pinned = dtr.memory_stats()["dtr.pinned_bytes.current"]
dtr.set_budget(pinned + 9 * MiB + 512 * 1024)
dtr.reset_peak_stats()
filler = torch.ones((9 * MiB + 512 * 1024 - 16384) // 4)  # big and small must both go
evictions = dtr.memory_stats()["dtr.num_evictions"]
del filler
p.add_(1.0)  # Note [Pinned writes]: big and small are refilled and pinned first
s = dtr.memory_stats()
print(json.dumps({"evictions": evictions, "remats": s["dtr.num_remats"],
                  "same": big.numpy().tobytes() == ref_big.tobytes() and
                          small.numpy().tobytes() == ref_small.tobytes(),
                  "peak": s["allocated_bytes.all.peak"], "budget": dtr.get_budget()}))
"""


def test_descendants_are_refilled_smallest_first(lib):
    stats = stats_of(WRITE, lib)
    assert stats["evictions"] >= 2 and stats["remats"] >= 2, stats
    assert stats["same"], stats
    assert stats["peak"] <= stats["budget"], stats


# Note [Parameters]: parameters made in grad mode (`nn.Parameter(torch.randn(n) * s)`, their
# storages recorded ops' outputs), SGD with momentum, zero_grad between the forward and the
# backward pass. Before, each step was recorded as a new version of the parameter, and the
# next zero_ pinned it and the activations computed from it: this script ran out of memory
# at 0.7 of its peak with 16 MiB pinned (a probe with 512-wide layers: 65 MiB), where the
# same model with parameters made under no_grad trains at 0.5. Arguments: the budget as a
# fraction (0: none) of a peak in bytes.
GRAD_MODE_PARAMETERS = TRAINING_PRELUDE + r"""
D, B = 256, 2048
class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(D, D) * (1.0 / D ** 0.5))  # in grad mode
        self.b = nn.Parameter(torch.zeros(D) + 0.01)
    def forward(self, x):
        return torch.tanh(x @ self.w + self.b)
model = nn.Sequential(*[Lin() for _ in range(6)])
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
apply_budget()
for step in range(10):
    with torch.no_grad():
        x = torch.randn(B, D)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    record(loss)
finish(model)
"""


def test_parameters_made_in_grad_mode_train_under_a_budget(lib):
    trains_as_without(GRAD_MODE_PARAMETERS, lib, (0.7, 0.5))


# Note [Pinned frontiers]: the loop still holds, at the optimizer step, the embeddings and
# four distance matrices computed from them (7 MiB besides 256 KiB of embeddings). Only the
# embeddings need the parameters' old values; the matrices are remade from them once they
# are pinned. Before, all five were pinned until the next step reassigned them, and this
# ran out of memory at 0.7 of its peak (a helper's probe, 2026-12-03; with a `del` of the
# matrices before the step it trained at 0.7).
HELD_DISTANCES = TRAINING_PRELUDE + r"""
torch.set_num_threads(1)  # on two threads its plain runs differ from run to run
N, D = 512, 256
model = nn.Sequential(nn.Linear(D, 1024), nn.LayerNorm(1024), nn.GELU(), nn.Linear(1024, 1024),
                      nn.ReLU(), nn.Linear(1024, 128))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
triplet = nn.TripletMarginLoss(margin=0.5, p=2)
with torch.no_grad():
    x, labels = torch.randn(N, D), torch.randint(0, 16, (N,))
apply_budget()
for step in range(4):
    e = model(x)
    d = torch.cdist(e, e)                                    # 1 MiB
    d2 = torch.cdist(e.repeat(2, 1), e.repeat(2, 1))         # 4 MiB
    same = labels[:, None] == labels[None, :]
    pos_d = d.masked_fill(~same, -1.0)                       # 1 MiB
    neg_d = d.masked_fill(same, 1e9)                         # 1 MiB
    loss = (triplet(e, e[pos_d.argmax(1)], e[neg_d.argmin(1)]) + 1e-3 * d2.mean() +
            1e-3 * torch.cdist(e, e, p=1.0).mean())
    opt.zero_grad()
    loss.backward()
    opt.step()
    record(loss)
finish(model)
"""


def test_storages_computed_from_a_pinned_descendant_stay_evictable(lib):
    trains_as_without(HELD_DISTANCES, lib, (0.7,))
