"""An op's time leaves out what the library did meanwhile to make room for its allocations
(Note [Host work in op times] in integration/torch/lineage.cpp): collecting, searching for
a victim, evicting. Until 2026-12-04 that work was charged to the op, as its compute in
every score and as the clock's tick. A residual MLP 500 layers deep and 64 wide on a
batch of 48 (12 KiB activations, evictable at min_evictable:4K) at 0.6 of its peak spent
most of its run making room: the charged compute of its ops came to 2.3 s there, against
0.24 s without a budget; with the time left out, 0.33 s. Since full collects wait for
their credit (Note [Collects when making room]) and dtr_eq's scores stop where they cannot
win, making room costs that depth about what its ops do, so the test runs a deeper one under
dtr, where it still costs several times more: 1400 layers since the bounded scan takes its
bounds from a heap (Note [Bound order by heap] in eviction/candidate_search.cpp), which
halved dtr's making room at 1000 layers (0.78-0.80 s -> 0.39-0.40 s, against 0.25-0.33 s of
ops; at 1400, 0.83-0.86 s against 0.33-0.36 s)."""
from conftest import Result, clean_env, driver, run, trains_bit_identically

RESIDUAL = ("mlp.py", "--width", "64", "--batch", "48", "--depth", "500", "--steps", "3",
            "--residual")
DEEP = RESIDUAL[:6] + ("1400",) + RESIDUAL[7:]


def test_op_times_leave_out_making_room(lib):
    # The ops' compute without a budget, the lesser of two runs: a single one, run next to
    # another test's processes, read 0.49-0.68 s where alone it reads 0.24 s (measured op
    # times take in what preemption costs), and the check below lost its margin.
    frees = [Result(run(driver(*DEEP), clean_env(LD_PRELOAD=lib, DTR_CONF="min_evictable:4K")))
             for _ in range(2)]
    unpressed = min((free.stats for free in frees), key=lambda st: st["dtr.model_compute_ns"])
    # Under dtr, whose scores search each candidate's evicted neighbourhood: since dtr_eq's
    # scores stop where they cannot win (Note [Cutoff scores]), making room under it costs
    # about what this model's ops do (0.43-0.75 s against 0.27 s, two threads), too little
    # to tell; under dtr, 0.93-0.95 s against 0.24 s at 1000 layers before the heap, 0.83-0.86 s
    # against 0.33-0.36 s at 1400 after it.
    # max_overhead:0: when dtr's first step evicts weight gradients, the first opt.step()
    # remakes each from the dead backward chain, and dtr's exact search over those long
    # evicted chains can pass the runaway stop's 10 s within that one op under load: once
    # in `pytest -n 2 test_thrash.py test_host_work.py test_python_api.py` (2026-12-04),
    # "10.0 s (10.0 s of it making room for them ...)" (Note [Room within remats]). The
    # stop is not what this test is about. Six runs with the stop off, two at a time, took
    # 2.8-3.3 s with 0.92-1.00 s of making room; none met that cascade.
    stats = trains_bit_identically(lib, DEEP, 0.6,
                                   conf="min_evictable:4K,policy:dtr,max_overhead:0").stats
    room = stats["dtr.make_room_ns"]
    # Making room took several times the ops' own compute; charged to the ops, it came back
    # as most of their compute (500 layers under dtr_eq, before: 2.30 s against 0.24 s, with
    # 2.44 s of making room). Left out, the ops cost what they cost without a budget, give
    # or take the noise of measured times, far under half of it. (The first check is that
    # margin: half of making room, over 0.4 s here, is more than the op times vary by.)
    assert room > 1.5 * unpressed["dtr.model_compute_ns"], stats
    assert stats["dtr.model_compute_ns"] < unpressed["dtr.model_compute_ns"] + room / 2, (
        unpressed, stats)
    # Note [Room within remats] (eviction/thrash_watch.cpp): the part of the remats' measured
    # time spent making room for them, which the thrash messages give, is part of both sums.
    assert 0 < stats["dtr.remat_room_ns"] <= stats["dtr.remat_measured_ns"], stats
    assert stats["dtr.remat_room_ns"] <= room, stats
    # With no budget the allocator asks before each new peak instead, and the scans and full
    # collects run then are left out the same way (2026-12-05). Here they are next to nothing
    # (about 10 ms), far under the budget run's making room.
    for free in frees:
        assert free.stats["dtr.make_room_ns"] < room / 4, (free.stats, stats)


def test_op_times_leave_out_the_work_before_new_peaks(lib):
    # At the default min_evictable this model's 12 KiB activations are pinned (Note [Small
    # storages]), and with no budget the full collects before new peaks were most of the
    # ops' charged compute: 1.20 s against 0.31 s at min_evictable:4K, where they are
    # evictable (2026-12-05, before these collects waited for their credit: Note [Dead
    # pinned storages at a new peak]); after, 0.54 s. Left out, 0.19 s, with 0.24 s of
    # making room. The lesser of two runs each, as above.
    def least(conf):
        runs = [Result(run(driver(*DEEP), clean_env(LD_PRELOAD=lib, DTR_CONF=conf))).stats
                for _ in range(2)]
        return min(runs, key=lambda st: st["dtr.model_compute_ns"])
    evictable, pinned = least("min_evictable:4K"), least(None)
    assert pinned["dtr.make_room_ns"] > 0, pinned
    assert pinned["dtr.model_compute_ns"] < (evictable["dtr.model_compute_ns"] +
                                             pinned["dtr.make_room_ns"] / 2), (pinned, evictable)


def test_the_default_policy_trains_the_residual_mlp_at_0_6(lib):
    """Under auto's live trial (dtr_eq, then trials of dtr_ancestors and msps, one step
    each). When ops were charged the search's time, 3 steps of a 1000-layer one at 0.6 ran
    for minutes under auto, dtr_ancestors and msps (stopped after 120-150 s; 22 s under
    dtr_eq), as each search inflated the costs that made the next one long. trial:live, so
    that a neighbourhood policy searches live: by replay (the default) the third step runs
    the replays' choice, which was dtr_eq's kind once in a make test (no searches)."""
    stats = trains_bit_identically(lib, RESIDUAL, 0.6, conf="min_evictable:4K,trial:live").stats
    assert stats["dtr.neighborhood_visits"] > 0, stats  # the trials' searches ran


def test_making_room_puts_full_collects_off(lib):
    """Note [Collects when making room]: a full collect walks all the lineage held, and one
    ran before nearly every eviction request, most of this run's time once the ops no longer
    paid for it. Now one waits until the ops since the last have earned it, unless dead
    pinned storages or a dead constant call for it."""
    stats = trains_bit_identically(lib, DEEP, 0.6, conf="min_evictable:4K,policy:dtr_eq").stats
    requests = stats["dtr.allocator_requests"]
    assert requests > 1000, stats
    assert 0 < stats["dtr.full_collects"] < requests / 4, stats
