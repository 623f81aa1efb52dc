"""Small storages under a budget (Note [Small storages] in integration/torch/lineage.cpp,
option min_evictable). An op's result smaller than min_evictable (16 KiB by default) is
pinned when recorded. Until 2026-12-04 the bound was fixed, and a deep, narrow model, whose
activations are all under it, got nothing from a budget. Here, an MLP 300 layers deep and
64 wide on a batch of 48 (12 KiB activations, 16 KiB weights): under the default bound every
activation stays pinned at 0.8 of its peak and the run is out of memory; with the bound
lowered it trains bit-identically there."""
import pytest

from conftest import baseline_peak, clean_env, driver, run, trains_bit_identically

DEEP_NARROW = ("mlp.py", "--width", "64", "--batch", "48", "--depth", "300", "--steps", "3")


@pytest.mark.parametrize("bound", ["4K", "1K", "0"])
def test_a_deep_narrow_mlp_trains_with_a_lower_bound(lib, bound):
    """At min_evictable:0 every result that holds memory may be evicted, the loss too."""
    trains_bit_identically(lib, DEEP_NARROW, 0.8, conf=f"min_evictable:{bound}")


def test_under_the_default_bound_its_activations_stay_pinned(lib):
    budget = int(baseline_peak(DEEP_NARROW, lib) * 0.8)
    proc = run(driver(*DEEP_NARROW), clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{budget}"),
               check=False)
    assert proc.returncode != 0
    assert "OutOfMemoryError" in proc.stderr, proc.stderr[-3000:]
    assert "evictable 0 B" in proc.stderr, proc.stderr[-3000:]
    # The error names the cause and a bound under the 12 KiB activations (Lineage::oom_advice).
    assert "or lower option min_evictable (now 16.00 KiB), as with DTR_CONF=min_evictable:8K: " \
        in proc.stderr, proc.stderr[-3000:]
