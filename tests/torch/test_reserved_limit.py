"""Option reserved_limit: what the allocator holds from the system (cached free segments
and small allocations included) stays under it, and the run trains bit for bit as
without the library. The budget alone caps live bytes only: the same run without the
limit reserves well above its budget, so the test would fail if the option did nothing.
"""
import json

import pytest

from conftest import PYTHON, Result, baseline_peak, clean_env, driver, run, trains_bit_identically

SCRIPT = ("transformer.py", "--steps", "3")


@pytest.fixture(scope="module")
def runs(lib):
    reference = Result(run(driver(*SCRIPT), clean_env()))
    baseline = Result(run(driver(*SCRIPT), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    budget = int(baseline.stats["allocated_bytes.all.peak"] * 0.5)
    return reference, budget


def budgeted(lib, conf):
    proc = run(driver(*SCRIPT), clean_env(LD_PRELOAD=lib, DTR_CONF=conf), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Result(proc)


def test_reserved_bytes_stay_under_the_limit(lib, runs):
    reference, budget = runs
    free = budgeted(lib, f"budget:{budget}")
    # Without the limit the cache holds more than the budget: the case the option is for.
    assert free.stats["reserved_bytes.all.peak"] > budget * 1.1, free.stats
    limit = budget + (2 << 20)
    capped = budgeted(lib, f"budget:{budget},reserved_limit:{limit}")
    stats = capped.stats
    assert stats["reserved_bytes.all.peak"] <= limit, stats
    assert stats["allocated_bytes.all.peak"] <= budget
    assert stats["num_ooms"] == 0
    assert stats["dtr.num_evictions"] > 0
    assert capped.losses() == reference.losses()
    assert capped.params() == reference.params()
    assert capped.buffers() == reference.buffers()


def test_a_limit_too_small_is_an_out_of_memory_error_naming_it(lib):
    code = ("import torch\n"
            "try:\n"
            "    x = torch.ones(4 * 1024 * 1024)\n"  # 16 MiB under an 8 MiB reserved limit
            "except torch.cuda.OutOfMemoryError as e:\n"
            "    print('OOM', e)\n")
    proc = run([PYTHON, "-c", code], clean_env(LD_PRELOAD=lib, DTR_CONF="reserved_limit:8M"))
    assert "OOM" in proc.stdout, proc.stdout + proc.stderr
    assert "reserved limit of 8.00 MiB" in proc.stdout, proc.stdout


def test_memory_summary_shows_the_limit(lib):
    code = "import torch, dtr\nprint(dtr.memory_summary())\n"
    proc = run([PYTHON, "-c", code],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:64M,reserved_limit:80M"))
    line = next(l for l in proc.stdout.splitlines() if "Reserved limit" in l)
    assert "80.00 MiB" in line, proc.stdout


def test_a_ratio_fails_at_start(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="reserved_limit:0.5"), check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "STARTED" not in proc.stdout
    assert "reserved_limit 0.5" in proc.stderr and "reserved_limit:300M" in proc.stderr, proc.stderr


# Note [Compaction] (allocator/caching_allocator.cpp), Note [Moving storages] (lineage.cpp).
# X: a 16 MiB segment, freed, then given a 3 MiB input; Y: a 20 MiB segment (made for a 20
# MiB tensor: under a reserved limit each segment is its request's size, Note [Segments
# under a reserved limit] in allocator/caching_allocator.cpp) holding a 2 MiB input. Both
# inputs are pinned constants (a recorded op read them), so nothing can be evicted. A 30 MiB
# tensor needs a fresh segment, and 36 + 30 MiB passes the 64 MiB limit: only moving one
# input out of its segment lets that segment go back.
COMPACTION = """
import sys, torch, dtr
MiB = 1 << 20
def make(n, seed):
    torch.manual_seed(seed)
    with torch.no_grad():  # pinned: opaque outside autograd (Note [Seeded factories])
        return torch.randn(n // 4)
a = torch.empty(16 * MiB // 4)
y = torch.empty(20 * MiB // 4)
del y
b = make(2 * MiB, 1)
del a
c = make(3 * MiB, 2)
b.sum(); c.sum()  # recorded ops read them: lineage knows both
if sys.argv[1] == "numpy":
    b.numpy()  # b's address is handed out: it must not move
moves = dtr.memory_stats()["dtr.num_block_moves"]
try:
    d = torch.zeros(30 * MiB // 4)
except torch.cuda.OutOfMemoryError as e:
    print("OOM", e)
    sys.exit(0)
s = dtr.memory_stats()
print("MOVES", s["dtr.num_block_moves"] - moves, s["dtr.moved_bytes"])
print("RESERVED", s["reserved_bytes.all.peak"], "EVICTIONS", s["dtr.num_evictions"])
print("SAME", torch.equal(b, make(2 * MiB, 1)), torch.equal(c, make(3 * MiB, 2)))
print(next(l for l in dtr.memory_summary().splitlines() if "Blocks moved" in l))
"""


def compaction(lib, conf, mode="plain"):
    proc = run([PYTHON, "-c", COMPACTION, mode],
               clean_env(LD_PRELOAD=lib, DTR_CONF="reserved_limit:64M" + conf))
    return proc.stdout


def test_compaction_moves_a_pinned_input_so_a_segment_can_go_back(lib, tmp_path):
    timeline = tmp_path / "run.json"
    out = compaction(lib, f",timeline:{timeline}")
    assert "OOM" not in out, out
    moves = out.split("MOVES ")[1].split()[:2]
    assert moves == ["1", str(2 << 20)], out  # b moved, and only b
    reserved = int(out.split("RESERVED ")[1].split()[0])
    assert reserved <= 64 << 20, out
    assert "EVICTIONS 0" in out, out
    assert "SAME True True" in out, out  # the moved bytes are the same bits
    assert "1, 2.00 MiB" in out.split("Blocks moved")[1], out  # and memory_summary says so
    # The timeline marks the compaction: one block, 2 MiB moved, Y's 20 MiB given back.
    events = json.loads(timeline.read_text())["traceEvents"]
    compactions = [e["args"] for e in events if e.get("cat") == "compaction"]
    assert compactions == [{"blocks": 1, "moved_bytes": 2 << 20, "released_bytes": 20 << 20}]


def test_without_compaction_nothing_moves_and_a_handed_out_address_stays(lib):
    # compact:False: the chain goes on to evict, has nothing to evict, and fails.
    out = compaction(lib, ",compact:False")
    assert "OOM" in out and "reserved limit of 64.00 MiB" in out, out
    # b.numpy() handed b's address to numpy: b stays, and c (3 MiB) leaves X instead.
    out = compaction(lib, "", mode="numpy")
    assert "OOM" not in out, out
    assert out.split("MOVES ")[1].split()[:2] == ["1", str(3 << 20)], out
    assert "SAME True True" in out, out


def test_resnet18_under_a_reserved_limit_near_its_budget(lib):
    # resnet18 at 0.5x of its peak: without a limit it reserves 1.8-2x its budget; under a
    # limit of 1.15x its budget it ran out of memory before compaction (free bytes in pieces
    # in segments that each keep one input batch or gradient: 6 of 6 runs with compact:False),
    # and now trains bit for bit. At 1.1x one run in the 35 or so seen still ran out of memory (the
    # eviction choices follow measured op times, and with them the layout): with nothing
    # evictable, the max-pool backward's inputs in use and the parameters' segments full,
    # no move frees a 32 MiB segment.
    script = ("vision.py", "--batch", "32", "--steps", "2")
    reference = Result(run(driver(*script), clean_env()))
    baseline = Result(run(driver(*script), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    budget = int(baseline.stats["allocated_bytes.all.peak"] * 0.5)
    limit = int(budget * 1.15)
    proc = run(driver(*script), clean_env(
        LD_PRELOAD=lib, DTR_CONF=f"budget:{budget},reserved_limit:{limit}"), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    capped = Result(proc)
    stats = capped.stats
    assert stats["reserved_bytes.all.peak"] <= limit, stats
    assert stats["allocated_bytes.all.peak"] <= budget
    assert stats["dtr.num_block_moves"] > 0, stats
    assert capped.losses() == reference.losses()
    assert capped.params() == reference.params()
    assert capped.buffers() == reference.buffers()


# Note [Segments under a reserved limit] (allocator/caching_allocator.cpp): under a limit
# each fresh segment is its request's size. Before, a 2 MiB tensor got a 20 MiB segment, and
# one that nothing could move or evict (the fresh batch) kept it: patterns.py's MLP at 0.7 of
# its peak under a limit of 1.25 times its budget ran out of memory asking for 512 KiB with
# 8 MiB allocated (hooks) or on its first batch (amp). Now both train bit for bit.
@pytest.mark.parametrize("pattern", ["hooks", "amp"])
def test_a_mid_size_tensor_does_not_keep_a_20_MiB_segment(lib, pattern):
    script = ("patterns.py", "--pattern", pattern, "--steps", "3")
    limit = int(int(baseline_peak(script, lib) * 0.7) * 1.25)
    result = trains_bit_identically(lib, script, 0.7, conf=f"reserved_limit:{limit}")
    assert result.stats["reserved_bytes.all.peak"] <= limit


def test_a_segment_is_the_size_of_its_tensor_under_a_limit(lib):
    code = ("import torch, dtr\n"
            "xs = [torch.ones(512 * 1024) for _ in range(3)]  # 2 MiB each\n"
            "s = dtr.memory_stats()\n"
            "print('RESERVED', s['reserved_bytes.large_pool.current'],\n"
            "      s['segment.large_pool.current'])\n")
    proc = run([PYTHON, "-c", code], clean_env(LD_PRELOAD=lib, DTR_CONF="reserved_limit:8M"))
    assert f"RESERVED {6 << 20} 3" in proc.stdout, proc.stdout + proc.stderr
    # Without a limit the first takes a 20 MiB segment and the others share it.
    proc = run([PYTHON, "-c", code], clean_env(LD_PRELOAD=lib))
    assert f"RESERVED {20 << 20} 1" in proc.stdout, proc.stdout + proc.stderr
