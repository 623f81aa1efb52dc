"""Seeded fills are recomputable (Note [Seeded ops] in integration/torch/dispatch_hook.cpp):
bernoulli_, uniform_ and normal_ results (dropout masks, initialisations) are evicted
under a budget and recomputed from a copy of their generator's state. Their values, and
what the program's generators draw afterwards, must be the bits of a run without the
library; before, they were pinned and this script ran out of memory."""
from conftest import PYTHON, clean_env, run

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
import dtr
if dtr.is_loaded():
    st = dtr.memory_stats()
    print("stats", st["dtr.num_evictions"], st["dtr.num_remats"], st["allocated_bytes.all.peak"])
"""


def test_seeded_fills_are_recomputed_bit_identical(lib, tmp_path):
    plain = run([PYTHON, "-c", SCRIPT], clean_env())
    trace = tmp_path / "seeded.trace"
    under = run([PYTHON, "-c", SCRIPT],
                clean_env(LD_PRELOAD=lib, DTR_CONF="budget:8M", DTR_TRACE=str(trace)))
    ours = [l for l in under.stdout.splitlines() if not l.startswith("stats")]
    assert ours == plain.stdout.splitlines(), under.stdout + under.stderr
    assert len(ours) == 15
    evictions, remats, peak = map(int, under.stdout.splitlines()[-1].split()[1:])
    assert peak <= 8 << 20
    # 14 MiB of draws in 8 MiB: draws were evicted and made again, not just the products.
    assert evictions > 0 and remats >= 6, under.stdout
    # The trace records them as ops (a replay may recompute them), not as constants.
    text = trace.read_text()
    assert text.count('"NAME":"aten::bernoulli_"') == 12
    assert '"NAME":"aten::uniform_"' in text and '"NAME":"aten::normal_"' in text
