"""Sparse tensors hold dense tensors (indices, values) that PyTorch's sparse kernels read
past the dispatcher. A storage lineage knows that a sparse tensor holds is pinned, and one
written through a sparse tensor is copied away first if lineage reads it (Note [Sparse
tensors] in integration/torch/lineage.cpp). Before, SparseAdam under a budget failed with
"The tensor has a non-zero number of elements, but its data is not allocated yet": the
values of its update had been evicted."""
from conftest import stats_of

HELD = r"""
import json, torch, dtr
MiB = 1 << 20
n = MiB // 4
torch.manual_seed(0)
base = torch.randn(n)                       # random: pinned (Note [Seeded ops])
v = (base * 2.0).reshape(n, 1)              # 1 MiB, recorded: evictable
i = torch.arange(n).unsqueeze(0)            # 2 MiB of int64 indices, recorded
u = v * torch.ones(1, 2)                    # 2 MiB; lineage reads v (more than v's
                                            # old value weighs: Note [Small frontiers])
w = base * 3.0                              # 1 MiB, evictable
with dtr.disable():
    ref_dense = (base * 4.0).reshape(n, 1).numpy().copy()
    ref_u = ((base * 2.0).reshape(n, 1) * torch.ones(1, 2)).numpy().copy()
    ref_w = (base * 3.0).numpy().copy()
pinned_before = dtr.memory_stats()["dtr.pinned_bytes.current"]
sp = torch.sparse_coo_tensor(i, v, (n, 1))  # holds v and i themselves
pinned_after = dtr.memory_stats()["dtr.pinned_bytes.current"]
del v, i
sp.mul_(2.0)                                # writes v's storage through sp
dtr.set_budget(dtr.memory_stats()["allocated_bytes.all.current"] + 64 * 1024)
dtr.reset_peak_stats()
filler = torch.ones(3 * MiB // 4)           # u and w must go
evictions = dtr.memory_stats()["dtr.num_evictions"]
del filler
dense = sp.to_dense()
print(json.dumps({"held": pinned_after - pinned_before, "evictions": evictions,
                  "dense": dense.numpy().tobytes() == ref_dense.tobytes(),
                  "u": u.numpy().tobytes() == ref_u.tobytes(),
                  "w": w.numpy().tobytes() == ref_w.tobytes(),
                  "peak": dtr.memory_stats()["allocated_bytes.all.peak"],
                  "budget": dtr.get_budget()}))
"""


def test_storages_a_sparse_tensor_holds_stay(lib):
    stats = stats_of(HELD, lib)
    # v and i pinned when sp took them (and a few bytes: the op's scalars)
    assert 3 << 20 <= stats["held"] < (3 << 20) + 4096, stats
    assert stats["evictions"] >= 2, stats   # u and w went for the filler
    assert stats["dense"], stats            # sp's values and indices were there
    assert stats["u"], stats                # u's remat read v as it was before mul_
    assert stats["w"], stats
    assert stats["peak"] <= stats["budget"], stats
