"""A run whose remats cost more than max_overhead times its own ops says so once (Note
[Thrashing in a live run] in eviction/thrash_watch.cpp): a warning by default, PyTorch's
out-of-memory error with on_thrash:raise, which the script can catch and go on; nothing
with max_overhead:0 or a budget with room. What the run computes never changes."""
import re

import pytest

from conftest import PYTHON, clean_env, left_as_thrashing, run

# A chain of 1 MiB matrix products, all kept, read back to front under a budget that holds
# a few: each read re-makes its matrix from the nearest one still in memory. The remats
# cost many times the program's own ops (here about 2.5 s against 0.2 s in the first 6
# walks). The digest covers those 6 walks; under the library the script walks on (up to 40
# walks) until the watch has fired, so that a faster machine, whose remats take less than
# the watch's 1 s in 6 walks, still gets there.
SCRIPT = r"""
import struct, zlib, torch
import dtr
def alerts():
    return dtr.memory_stats()["dtr.num_thrash_alerts"] if dtr.is_enabled() else None
torch.manual_seed(0)
w = torch.randn(512, 512) / 512 ** 0.5
chain = [torch.randn(512, 512)]
for _ in range(30):
    chain.append(chain[-1] @ w)
sums = []
try:
    for walk in range(40):
        if walk >= 6 and alerts() != 0:
            break
        for t in reversed(chain):
            value = float(t.sum())
            if walk < 6:
                sums.append(value)
except torch.cuda.OutOfMemoryError as e:
    print("OOM", str(e).replace("\n", " "))
    print("AFTER", float(chain[-1].sum()) == sums[0])
else:
    print("DIGEST", zlib.crc32(struct.pack(f"{len(sums)}d", *sums)))
print("ALERTS", alerts())
"""

BUDGET = "6M"


def alerts(proc):
    return re.search(r"^ALERTS (\S+)", proc.stdout, re.M).group(1)


def suggests_msps(warning):
    """The warning suggests policy:msps, or says auto has left it (Note [Thrashing period]:
    its candidates are cut in turn, dtr_eq, dtr_ancestors, then msps, and on a fast enough
    machine all three could be cut before the warning's second of remats)."""
    if "msps" in left_as_thrashing(warning):
        return "policy:msps" not in warning
    return "policy:msps" in warning


def plain_digest():
    proc = run([PYTHON, "-c", SCRIPT], clean_env())
    return re.search(r"^DIGEST \d+", proc.stdout, re.M).group(0)


def test_thrashing_is_a_warning_by_default(lib):
    proc = run([PYTHON, "-c", SCRIPT],
               clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{BUDGET},report:True"))
    assert '"dtr.num_thrash_alerts":1' in proc.stderr, proc.stderr
    # (The report's dtr.policy may say "thrashing period cut short": auto left dtr_eq.)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("dtr: thrashing")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dtr: thrashing: remats took "), lines[0]
    # Note [Room within remats]: what of that was making room for them
    assert re.search(r"remats took [\d.]+ s \([\d.]+ s of it making room for them: searching, "
                     r"evicting\) against ", lines[0]), lines[0]
    assert "since the budget was set (the run took" in lines[0], lines[0]
    assert "max_overhead 2; budget 6.00 MiB)" in lines[0], lines[0]
    # dead_first is on by default here, so msps and remake_factor are left to suggest (msps
    # unless auto has left it as thrashing, which the warning then says instead).
    assert suggests_msps(lines[0]) and "dead_first" not in lines[0], lines[0]
    assert "remake_factor:1" in lines[0], lines[0]
    assert "on_thrash:raise" in lines[0]
    assert alerts(proc) == "1", proc.stdout
    assert re.search(r"^DIGEST \d+", proc.stdout, re.M).group(0) == plain_digest()


def test_remake_factor_keeps_the_bits_and_leaves_the_advice(lib):
    """Option remake_factor (Note [Storages remade again and again]) reaches the live run:
    the chain still thrashes at 6M, bit for bit as without the library, and the warning no
    longer suggests what the run already does."""
    proc = run([PYTHON, "-c", SCRIPT],
               clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{BUDGET},remake_factor:1"))
    lines = [l for l in proc.stderr.splitlines() if l.startswith("dtr: thrashing")]
    assert len(lines) == 1, proc.stderr
    assert suggests_msps(lines[0]) and "remake_factor" not in lines[0], lines[0]
    assert re.search(r"^DIGEST \d+", proc.stdout, re.M).group(0) == plain_digest()


def test_thrashing_raises_out_of_memory_once_with_on_thrash_raise(lib):
    proc = run([PYTHON, "-c", SCRIPT],
               clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{BUDGET},on_thrash:raise"))
    oom = next((l for l in proc.stdout.splitlines() if l.startswith("OOM ")), None)
    assert oom is not None, proc.stdout + proc.stderr
    assert "dtr: thrashing: remats took " in oom
    assert "thrashing" not in proc.stderr  # raised, not printed
    assert "AFTER True" in proc.stdout  # the run goes on after catching it
    assert alerts(proc) == "1", proc.stdout


def test_no_alert_with_max_overhead_0_or_room(lib):
    for conf in (f"budget:{BUDGET},max_overhead:0", "budget:400M"):
        proc = run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF=conf))
        assert "thrashing" not in proc.stderr, (conf, proc.stderr)
        assert alerts(proc) == "0", (conf, proc.stdout)
        assert "DIGEST" in proc.stdout


def test_set_budget_rearms_the_watch(lib):
    """Once per budget: after the raise, the same budget set again by dtr.set_budget counts
    from then and raises again on the next walks."""
    script = SCRIPT.replace(
        'print("AFTER", float(chain[-1].sum()) == sums[0])',
        'print("AFTER", float(chain[-1].sum()) == sums[0])\n'
        '    dtr.set_budget("6M")\n'
        '    try:\n'
        '        for _ in range(40):\n'
        '            for t in reversed(chain):\n'
        '                t.sum()\n'
        '    except torch.cuda.OutOfMemoryError as e2:\n'
        '        print("OOM2", str(e2).replace("\\n", " "))')
    assert "OOM2" in script
    proc = run([PYTHON, "-c", script],
               clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{BUDGET},on_thrash:raise"))
    assert "AFTER True" in proc.stdout, proc.stdout + proc.stderr
    oom2 = next((l for l in proc.stdout.splitlines() if l.startswith("OOM2 ")), None)
    assert oom2 is not None and "dtr: thrashing: " in oom2, proc.stdout + proc.stderr
    assert alerts(proc) == "2", proc.stdout


# One op whose input is the end of a long chain (matrix product, then tanh), all evicted:
# locking it rematerializes the whole chain in one cascade. The chain is built for 4 s of
# the program's own ops before the budget is set, so the watch, which counts from the
# budget, sees remats only; it fires once they pass its 1 s floor, about a quarter of the
# way down the chain (the remats would have to run 4 times as fast as the chain was built
# for it not to fire at all, on a machine whose load changes). The inputs are drawn under
# no_grad, as a DataLoader's data: never recomputed. TRIGGER is what starts the cascade.
CASCADE = r"""
import time, torch
import dtr
torch.manual_seed(0)
with torch.no_grad():
    w = torch.randn(512, 512)
    x = torch.randn(512, 512)
first = x  # held, so the chain's end stays evictable (a dead first x would be cut loose for
links = 0  # it, Note [Small frontiers] in lineage.cpp: both are 1 MiB)
start = time.perf_counter()
while time.perf_counter() - start < 4.0 or links < 50:
    x = torch.tanh(x @ w)
    links += 1
expected = float(x.sum())
dtr.set_budget("6M")
filler = torch.ones(7 * 2 ** 17)  # 3.5 MiB: with w, the first x (pinned) and x, over 6 MiB
del filler
stats = dtr.memory_stats()
print("EVICTED", stats["dtr.num_evictions"] > 0)
before = stats["dtr.num_remats"]
try:
    TRIGGER
    print("NO RAISE")
except torch.cuda.OutOfMemoryError as e:
    print("OOM", str(e).replace("\n", " "))
    print("REMATS", dtr.memory_stats()["dtr.num_remats"] - before, "OF", 2 * links)
print("AFTER", float(x.sum()) == expected)
print("ALERTS", dtr.memory_stats()["dtr.num_thrash_alerts"])
"""


# Each way a materialization starts: locking an op's input; a raw access (Note [Raw
# access]); the pins before an in-place write to a pinned storage that lineage read, here
# w, whose live descendant is the chain's end (Note [Pinned writes]).
TRIGGERS = {"op input": "x.sum()", "raw access": "x.numpy()", "pinned write": "w.mul_(1.0)"}


@pytest.mark.parametrize("trigger", TRIGGERS.values(), ids=TRIGGERS.keys())
def test_a_cascade_inside_one_op_is_stopped_with_on_thrash_raise(lib, trigger):
    """Note [Thrashing within one op] (integration/torch/lineage.cpp): the raise comes
    from the call whose materialization cascades, part way down the chain, not after the
    cascade; the run then goes on, and reads the value it had before the budget was set
    (the write did not run)."""
    script = CASCADE.replace("TRIGGER", trigger)
    proc = run([PYTHON, "-c", script], clean_env(LD_PRELOAD=lib, DTR_CONF="on_thrash:raise"))
    assert "EVICTED True" in proc.stdout, proc.stdout + proc.stderr
    oom = next((l for l in proc.stdout.splitlines() if l.startswith("OOM ")), None)
    assert oom is not None, proc.stdout + proc.stderr
    assert "dtr: thrashing: remats took " in oom and "budget 6.00 MiB" in oom, oom
    remats, ops = map(int, re.search(r"^REMATS (\d+) OF (\d+)", proc.stdout, re.M).groups())
    assert 0 < remats < ops, proc.stdout  # all of them, with the raise only after the op
    assert "AFTER True" in proc.stdout, proc.stdout + proc.stderr
    assert alerts(proc) == "1", proc.stdout


# Note [Runaway cascades] (eviction/thrash_watch.cpp): a 2-layer LSTM and a bidirectional
# GRU with Adam and clip_grad_norm_ (3.4 s for 3 steps without the library), at about 0.5
# of its peak. Before, under the default on_thrash:warn it warned after a few seconds and
# then sat in one op (clip_grad_norm_'s mul_ on an evicted gradient) for over 580 s.
RUNAWAY = r"""
import torch
torch.manual_seed(0)
lstm = torch.nn.LSTM(128, 256, num_layers=2, batch_first=True, dropout=0.1)
gru = torch.nn.GRU(256, 128, batch_first=True, bidirectional=True)
head = torch.nn.Linear(256, 10)
params = list(lstm.parameters()) + list(gru.parameters()) + list(head.parameters())
opt = torch.optim.Adam(params, lr=1e-3)
try:
    for i in range(3):
        with torch.no_grad():
            x = torch.randn(64, 100, 128)
            y = torch.randint(0, 10, (64,))
        opt.zero_grad()
        h, (hn, cn) = lstm(x)
        h2, hn2 = gru(h)
        loss = (torch.nn.functional.cross_entropy(head(h2[:, -1]), y) + hn.pow(2).mean()
                + cn.pow(2).mean() + hn2.pow(2).mean())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
    print("FINISHED")
except torch.cuda.OutOfMemoryError as e:
    print("OOM", str(e).replace("\n", " "))
"""


def test_a_runaway_cascade_is_stopped_under_the_default_warn(lib):
    # One thread. The cascade comes in the first or the second step, run to run (the
    # schedule follows measured op times), so the stop takes 25-60 s of remats here (10
    # times the program's ops so far, Note [Runaway cascades]) and the run 45-90 s alone;
    # beside the suite's other tests it took over 300 s once.
    # policy:dtr_eq: under the default auto, whose cut goes by the host's time since
    # 2026-12-06 (Note [Thrashing period] in auto_heuristic.cpp), the run left the cascading
    # candidates and finished, once in three make tests. max_overhead:1, the stop at 10 times
    # the ops (10 s at least) rather than 20: under dtr_eq at the default, a cascade spread
    # over many ops finished once in 7 runs by hand (160 000 remats), and the test failed once
    # in 8; at 1, 4 runs of 4 were stopped. On 2026-12-06 (seventy-first session) one run
    # beside the suite's other tests did not cascade at all (1.0 s of remats, FINISHED with
    # a thrash warning), while 3 runs of 3 alone were stopped: whether it cascades follows
    # the op times measured, so a run that finished is run once more, and one of the two must
    # be stopped.
    for _ in range(2):
        proc = run([PYTHON, "-c", RUNAWAY],
                   clean_env(LD_PRELOAD=lib,
                             DTR_CONF="budget:106633216,policy:dtr_eq,max_overhead:1",
                             OMP_NUM_THREADS="1"), timeout=600)
        assert proc.stdout.strip().endswith("FINISHED") or "OOM " in proc.stdout, \
            proc.stdout + proc.stderr
        oom = next((l for l in proc.stdout.splitlines() if l.startswith("OOM ")), None)
        if oom is not None:
            break
    assert oom is not None, proc.stdout + proc.stderr
    assert "dtr: runaway thrashing: the remats for one op's inputs have run " in oom, oom
    assert re.search(r"have run [\d.]+ s \([\d.]+ s of it making room for them", oom), oom
    assert "on_thrash:warn too" in oom, oom
    assert "dtr: thrashing: " in proc.stderr, proc.stderr  # the warning came first
