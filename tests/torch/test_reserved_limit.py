"""Option reserved_limit: what the allocator holds from the system (cached free segments
and small allocations included) stays under it, and the run trains bit for bit as
without the library. The budget alone caps live bytes only: the same run without the
limit reserves well above its budget, so the test would fail if the option did nothing.
"""
import pytest

from conftest import PYTHON, Result, clean_env, driver, run

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
