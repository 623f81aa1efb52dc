"""Seeded fills are recomputable (Note [Seeded ops] in integration/torch/dispatch_hook.cpp):
bernoulli_, uniform_ and normal_ results (dropout masks, initialisations) are evicted
under a budget and recomputed from a copy of their generator's state. Their values, and
what the program's generators draw afterwards, must be the bits of a run without the
library; before, they were pinned and this script ran out of memory. Once the budget
binds, dropout masks are kept packed to bits and unpacked instead (Note [Packed masks] in
integration/torch/lineage.cpp), with the same bits. Seeded factories (randn, rand, randint,
randperm, normal, bernoulli: Note [Seeded factories]) are recomputed the same way, and so are
the `_like` factories (Note [Seeded like factories]).
And since Note [Vector masks] (core/packed_mask.cpp) float32 masks pack through SSE2: the
dropout test below checks those bits too."""
import json
import re
from types import SimpleNamespace

from conftest import PYTHON, clean_env, run

# The last line of the scripts given to draws_under_budget, under the library: what the
# run evicted and remade, and its peak.
STATS = r"""
import dtr
if dtr.is_loaded():
    st = dtr.memory_stats()
    print("stats", st["dtr.num_evictions"], st["dtr.num_remats"], st["allocated_bytes.all.peak"])
"""


def draws_under_budget(lib, tmp_path, script, budget_mib):
    """`script` without the library and under a budget, traced: the lines both printed
    (which must be equal), the run's evictions and remats (its peak must be within the
    budget), the trace's text and the ops its remats ran (from the timeline)."""
    plain = run([PYTHON, "-c", script + STATS], clean_env()).stdout.splitlines()
    trace, timeline = tmp_path / "draws.trace", tmp_path / "draws.json"
    under = run([PYTHON, "-c", script + STATS],
                clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{budget_mib}M",
                          DTR_TRACE=str(trace), DTR_TIMELINE=str(timeline)))
    lines = under.stdout.splitlines()
    assert lines[:-1] == plain, under.stdout + under.stderr
    evictions, remats, peak = map(int, lines[-1].split()[1:])
    assert peak <= budget_mib << 20, lines[-1]
    made = {e["name"] for e in json.loads(timeline.read_text())["traceEvents"]
            if e.get("cat") == "remat"}
    return SimpleNamespace(lines=plain, evictions=evictions, remats=remats,
                           trace=trace.read_text(), made=made)

SCRIPT = r"""
import struct, torch
torch.manual_seed(0)
n = 1 << 18  # 1 MiB of float32 each: 14 MiB of draws under an 8 MiB budget
masks = [torch.empty(n).bernoulli_(0.5) for _ in range(12)]
u = torch.empty(n).uniform_(-1, 1)
g = torch.Generator().manual_seed(7)
v = torch.empty(n).normal_(0, 1, generator=g)   # an explicit generator
w = torch.arange(n, dtype=torch.float64)
for i, m in enumerate(masks + [u, v]):
    print("digest", i, struct.pack("<d", torch.sum(m * w).item()).hex())
print("next", struct.pack("<4f", *torch.rand(4).tolist()).hex(),
      struct.pack("<f", torch.randn(1, generator=g).item()).hex())
"""


def test_seeded_fills_are_recomputed_bit_identical(lib, tmp_path):
    draws = draws_under_budget(lib, tmp_path, SCRIPT, 8)
    assert len(draws.lines) == 15
    # 14 MiB of draws in 8 MiB: draws were evicted and made again, not just the products.
    assert draws.evictions > 0 and draws.remats >= 6, draws
    # The trace records them as ops (a replay may recompute them), not as constants.
    text = draws.trace
    assert text.count('"NAME":"aten::bernoulli_"') == 12
    assert '"NAME":"aten::uniform_"' in text and '"NAME":"aten::normal_"' in text


DROPOUT = r"""
import hashlib, struct, torch
import torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(1 << 18, requires_grad=True)  # 1 MiB; each dropout keeps a 1 MiB mask
total = 0
for i in range(12):
    total = total + F.dropout(x * (i + 1), p=0.3, training=True).sum()
total.backward()
print("loss", struct.pack("<f", total.item()).hex())
print("grad", hashlib.sha256(x.grad.numpy().tobytes()).hexdigest())
print("next", struct.pack("<4f", *torch.rand(4).tolist()).hex())
import dtr
if dtr.is_loaded():
    st = dtr.memory_stats()
    print("stats", st["dtr.num_evictions"], st["dtr.num_packed_masks"],
          st["dtr.num_mask_unpacks"], st["allocated_bytes.all.peak"])
"""


def test_dropout_masks_are_packed_and_unpacked_bit_identical(lib, tmp_path):
    # Note [Packed masks] (integration/torch/lineage.cpp): once the budget binds, what
    # bernoulli_ wrote is kept as bits and a remat unpacks it; the gradient, and what the
    # generator draws next, are the bits of a run without the library, packed or replayed.
    plain = run([PYTHON, "-c", DROPOUT], clean_env()).stdout.splitlines()
    assert len(plain) == 3
    counts = {}
    for pack, traced in (("True", False), ("True", True), ("False", True)):
        trace = tmp_path / f"dropout-{pack}.trace"
        under = run([PYTHON, "-c", DROPOUT],
                    clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:8M,pack_masks:{pack},op_cost:measured",
                              DTR_TRACE=str(trace) if traced else None))
        lines = under.stdout.splitlines()
        assert lines[:3] == plain, under.stdout + under.stderr
        evictions, packed, unpacked, peak = map(int, lines[3].split()[1:])
        assert evictions > 0 and peak <= 8 << 20, lines[3]
        counts[pack, traced] = (packed, unpacked)
        if not traced:
            continue
        # Note [Remat cost]: a packed mask's remat cost goes into the trace as REMAT_TIME.
        # (op_cost:measured above, so that no other estimate writes one: Note [Noisy op times].)
        calls = [json.loads(l) for l in trace.read_text().splitlines()
                 if '"NAME":"aten::bernoulli_"' in l]
        assert len(calls) == 12
        cheap = [c for c in calls if "REMAT_TIME" in c]
        assert len(cheap) == packed, (len(cheap), packed)
        # The unpack's estimate (the pack time), not the draw's: a timing, so only its form
        # is checked here (an unpack is cheaper, but a loaded machine can say otherwise).
        assert all(isinstance(c["REMAT_TIME"], int) and c["REMAT_TIME"] > 0 for c in cheap), cheap
    # 12 MiB of masks under 8 MiB: those drawn after the first eviction are packed, and the
    # backward pass unpacks the ones it evicted. A run that records a trace packs them all,
    # so that the trace prices their remats as a run under pressure pays them. With
    # pack_masks:False a remat draws again.
    assert 4 <= counts["True", False][0] < 12 and counts["True", False][1] >= 1, counts
    assert counts["True", True][0] == 12 and counts["True", True][1] >= 1, counts
    assert counts["False", True] == (0, 0), counts


FACTORIES = r"""
import struct, torch
torch.manual_seed(0)
n = 1 << 18  # 1 MiB of float32 each: 13 MiB of draws under an 8 MiB budget
g = torch.Generator().manual_seed(7)
draws = [torch.randn(n) for _ in range(3)] + [torch.rand(n) for _ in range(3)]
draws += [torch.randint(0, 1000, (n // 2,)), torch.randint(1000, (n // 2,), generator=g)]
draws += [torch.randperm(n // 2), torch.normal(torch.zeros(n), 2.0),
          torch.normal(0.0, 1.0, (n,), generator=g)]
draws += [torch.bernoulli(torch.full((n,), 0.3)), torch.randn(n, generator=g)]
with torch.no_grad():
    kept = torch.randn(n)  # outside grad mode: opaque, as an initialisation is
w = torch.arange(n, dtype=torch.float64)
for i, m in enumerate(draws + [kept]):
    print("digest", i, struct.pack("<d", torch.sum(m.double() * w[: m.numel()]).item()).hex())
print("next", struct.pack("<4f", *torch.rand(4).tolist()).hex(),
      struct.pack("<f", torch.randn(1, generator=g).item()).hex())
"""


def test_seeded_factories_are_recomputed_bit_identical(lib, tmp_path):
    # Note [Seeded factories] (dispatch_hook.cpp): randn, rand, randint and randperm are
    # recorded as their `.generator` overloads with a copy of the generator, normal and
    # bernoulli with their own argument; evicted draws are made again with the same bits,
    # and what the generators draw next is what it would be without the library.
    draws = draws_under_budget(lib, tmp_path, FACTORIES, 8)
    assert len(draws.lines) == 15
    assert draws.evictions > 0, draws
    # Each kind of draw was evicted and made again by its own op.
    for op in ("randn", "rand", "randint", "randperm", "normal", "bernoulli"):
        assert f"aten::{op}" in draws.made, draws.made
    # The trace records them as ops, the one drawn under no_grad as a constant.
    text = draws.trace
    assert text.count('"NAME":"aten::randn"') == 4 + 1  # and the last line's randn(1)
    assert text.count('"NAME":"aten::randperm"') == 1


LIKE = r"""
import struct, torch
torch.manual_seed(0)
n = 1 << 18  # 1 MiB of float32 each: 12.5 MiB of draws and 3 MiB of shapes under a 12 MiB budget
base = torch.zeros(n)
cl = torch.zeros(8, 8, 64, 64).to(memory_format=torch.channels_last)  # 1 MiB, permuted
tr = torch.zeros(512, 512).t()  # 1 MiB, transposed
draws = [torch.randn_like(base) for _ in range(3)] + [torch.rand_like(base) for _ in range(3)]
draws += [torch.randn_like(cl), torch.rand_like(tr), torch.randn_like(base, dtype=torch.float64)]
draws += [torch.randint_like(base, 1000), torch.randint_like(base, -5, 5)]
draws += [torch.randint_like(tr, 3, 9, dtype=torch.int64)[:256]]
with torch.no_grad():
    kept = torch.randn_like(base)  # outside grad mode: opaque, as an initialisation is
del base, cl, tr  # the draws' remats need only their generators' copies
w = torch.arange(n, dtype=torch.float64)
for i, m in enumerate(draws + [kept]):
    print("digest", i, m.stride(), m.dtype,
          struct.pack("<d", torch.sum(m.double().reshape(-1) * w[: m.numel()]).item()).hex())
print("next", struct.pack("<4f", *torch.rand(4).tolist()).hex())
"""


def test_like_factories_are_recomputed_bit_identical(lib, tmp_path):
    # Note [Seeded like factories] (dispatch_hook.cpp): randn_like, rand_like and
    # randint_like run as empty_like and a recorded fill; evicted draws are made again by
    # their fills with the same bits and strides, and the generator draws next what it
    # would without the library.
    draws = draws_under_budget(lib, tmp_path, LIKE, 12)
    assert len(draws.lines) == 14
    assert draws.evictions > 0 and draws.remats > 0, draws
    for op in ("normal_", "uniform_", "random_"):
        assert f"aten::{op}" in draws.made, draws.made
    # Each draw is its fill over an empty_like, channels-last and transposed ones too
    # (Note [Overwrite] in lineage.cpp): the trace has no randn_like, and no fill reads a
    # tensor, `self` (base, cl, tr) or the empty_like's.
    events = [json.loads(l) for l in draws.trace.splitlines()]
    calls = [e for e in events if e.get("INSTRUCTION") == "CALL"]
    names = [c["NAME"] for c in calls]
    assert "aten::randn_like" not in names and names.count("aten::normal_") == 5, names
    assert names.count("aten::uniform_") == 4 and names.count("aten::random_") == 3, names
    for c in calls:
        if c["NAME"] in ("aten::normal_", "aten::uniform_", "aten::random_"):
            assert c["ARGS"] == [], c  # overwrites its empty_like whole: reads nothing


JACOBIAN = r"""
import hashlib, torch
torch.manual_seed(0)
w1 = torch.randn(64, 256) * 0.1  # drawn in grad mode: recorded, remade by a seeded replay
w2 = torch.randn(256, 256) * 0.1
def f(x):
    h = torch.tanh(x @ w1)
    for _ in range(4):
        h = torch.tanh(h @ w2)
    return h.sum(0)
with torch.no_grad():
    xs = [torch.randn(512, 64) for _ in range(2)]
for s, x in enumerate(xs):
    j = torch.autograd.functional.jacobian(f, x, vectorize=True)
    print("DIGEST", s, hashlib.sha256(j.numpy().tobytes()).hexdigest()[:16], flush=True)
"""


def test_a_seeded_factory_remade_inside_legacy_vmap_matches(lib):
    """jacobian(vectorize=True) runs its backward under legacy vmap, whose VmapMode key is in
    the thread's included keys; a remat of torch.randn there reached vmap's check on random
    ops and raised (a probe, 2026-12-07), where the run without dtr trains on."""
    plain = run([PYTHON, "-c", JACOBIAN], clean_env())
    expected = [l for l in plain.stdout.splitlines() if l.startswith("DIGEST")]
    assert len(expected) == 2, plain.stdout + plain.stderr
    proc = run([PYTHON, "-c", JACOBIAN], clean_env(LD_PRELOAD=lib, DTR_BUDGET="300M",
                                                    DTR_REPORT="1"))
    got = [l for l in proc.stdout.splitlines() if l.startswith("DIGEST")]
    assert got == expected, proc.stdout + proc.stderr
    remats = int(re.search(r'"dtr.num_remats":(\d+)', proc.stderr).group(1))
    assert remats > 0, proc.stderr
