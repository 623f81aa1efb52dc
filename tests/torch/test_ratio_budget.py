"""Note [Ratio budgets] (integration/torch/lineage.cpp): DTR_CONF=budget:0.5x sets the
budget to half the peak over the first two training steps, at the end of the second; an
unmodified script then trains as without the library. One that cannot fit is told at its
next op, one that never ends two steps at exit; python's dtr.set_budget takes a ratio of
the peak so far, and lowers a budget below what is allocated by evicting."""
import json
import re

from conftest import PYTHON, TRAINING_PRELUDE, clean_env, last_json, run

# An MLP under Adam, whose state is made in the first step's optimizer step: the second
# step's peak is the steady one. Nothing in it knows of budgets; what it reads of dtr
# (after the second step) is only for the test.
MLP_ADAM = TRAINING_PRELUDE + r"""
model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(256, 256), nn.ReLU())],
                      nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
with torch.no_grad():
    x, y = torch.randn(4096, 256), torch.randint(0, 10, (4096,))
steps = int(sys.argv[1])
for step in range(steps):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    record(loss)
    if dtr is not None and dtr.is_enabled() and step == 1:
        OUT["max_after_two"] = dtr.max_memory_allocated()
        OUT["budget"] = dtr.get_budget()
        OUT["evictions_before"] = dtr.memory_stats()["dtr.num_evictions"]
finish(model)
"""


def ratio_line(stderr):
    match = re.search(r"dtr: budget 0\.5x of the peak over the first 2 training steps "
                      r"\(([^)]*)\): ([^(]*) from here on \((\d+) bytes\)", stderr)
    assert match, stderr
    return int(match.group(3))


def test_a_ratio_budget_is_set_after_two_steps_and_trains_as_without(lib):
    plain = last_json(run([PYTHON, "-c", MLP_ADAM, "6"], clean_env()))
    # The first two steps' peak, as the ratio run (no budget yet) reaches it.
    free = last_json(run([PYTHON, "-c", MLP_ADAM, "2"], clean_env(LD_PRELOAD=lib)))
    proc = run([PYTHON, "-c", MLP_ADAM, "6"], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:0.5x"))
    under = last_json(proc)
    budget = ratio_line(proc.stderr)
    assert under["budget"] == budget == int(0.5 * free["peak"]), (under, budget, free)
    assert under["evictions_before"] == 0, under      # no budget in the first two steps
    # The peak stats restart with the budget: what they read is the budgeted steps'.
    assert under["max_after_two"] < free["peak"], (under, free)
    assert under["evictions"] > 0 and under["peak"] <= budget, under
    assert (under["losses"], under["params"]) == (plain["losses"], plain["params"]), under
    assert "never set" not in proc.stderr, proc.stderr


def test_a_ratio_budget_that_cannot_fit_raises_at_the_next_op(lib):
    """Between steps the parameters, their gradients, Adam's state and the batch stay
    (12.1 MiB, 0.24 of the 52.1 MiB peak): a tenth of the peak cannot hold them. The budget is not
    set, and the program's next op raises PyTorch's out-of-memory error, which says what
    to try."""
    proc = run([PYTHON, "-c", MLP_ADAM, "4"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:0.1x,report:True"), check=False)
    assert proc.returncode != 0, proc.stdout
    assert "OutOfMemoryError" in proc.stderr, proc.stderr
    message = next(l for l in proc.stderr.splitlines()
                   if "OutOfMemoryError: dtr: out of memory: budget 0.1x" in l)
    for needle in ("of the peak over the first 2 training steps", "stay allocated between "
                   "steps", "The budget was not set", "Try: a ratio of at least"):
        assert needle in message, message
    # num_ooms counts it, as every out-of-memory error the program saw (it read 0).
    report = next(l for l in proc.stderr.splitlines() if l.startswith("dtr: report "))
    assert json.loads(report[len("dtr: report "):])["num_ooms"] == 1, report


def test_a_ratio_budget_never_set_is_reported_at_exit(lib):
    """Forward passes only: no optimizer step, no dtr.mark_step(), so no budget."""
    code = ("import torch\nm = torch.nn.Linear(256, 256)\n"
            "for _ in range(3):\n    m(torch.randn(64, 256)).sum().backward()\n"
            "import dtr\nassert dtr.get_budget() is None\nprint('RAN')\n")
    proc = run([PYTHON, "-c", code], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:0.5x"))
    assert "RAN" in proc.stdout
    assert ("dtr: warning: budget 0.5x was never set: it is set after the program's first 2 "
            "training steps") in proc.stderr, proc.stderr
    assert "and the program ended 0;" in proc.stderr, proc.stderr


def test_a_ratio_budget_marked_steps_and_dtr_set_budget(lib):
    """dtr.mark_step() ends steps too; dtr.set_budget takes a ratio of the peak so far
    and, below what is allocated, evicts rather than refuses."""
    code = r"""
import torch, dtr
MiB = 1 << 20
with torch.no_grad():
    x = torch.randn(1024, 1024)                 # 4 MiB, data
y = x * 2                                       # 4 MiB, recorded
z = x * 3                                       # 4 MiB, recorded
expected = (x * 3).sum().item()
print("BEFORE", dtr.max_memory_allocated())
dtr.mark_step(); dtr.mark_step()                # the ratio's two steps
print("AFTER", dtr.get_budget(), dtr.max_memory_allocated())   # peak stats restarted
dtr.set_budget(None)
dtr.set_budget("0.9x")                          # of the peak so far: nothing evicted
print("RATIO", dtr.get_budget(), dtr.max_memory_allocated())
dtr.set_budget(None)
dtr.set_budget(9 * MiB)                         # 12 MiB allocated: one evicted
s = dtr.memory_stats()
print("LOWERED", dtr.get_budget(), s["allocated_bytes.all.current"], s["dtr.num_evictions"])
del y                                           # room to remake z from x, if z went
print("SAME", z.sum().item() == expected)
try:
    dtr.set_budget(3 * MiB)                     # x alone is 4 MiB, and pinned
except dtr.DtrError as e:
    print("REFUSED", e)
print("KEPT", dtr.get_budget())
"""
    proc = run([PYTHON, "-c", code], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:0.8x"))
    lines = dict(l.split(" ", 1) for l in proc.stdout.splitlines())
    before = int(lines["BEFORE"])
    marked, restarted = map(int, lines["AFTER"].split())
    ratio, peak = map(int, lines["RATIO"].split())
    assert marked == int(0.8 * before) and restarted < before, (before, marked, restarted)
    assert peak == restarted and ratio == int(0.9 * peak), (ratio, peak, restarted)
    budget, allocated, evictions = map(int, lines["LOWERED"].split())
    assert budget == 9 << 20 and allocated <= budget and evictions >= 1, lines["LOWERED"]
    assert lines["SAME"] == "True"
    assert "allocated now after evicting all that could be" in lines["REFUSED"], lines
    assert int(lines["KEPT"]) == 9 << 20
    assert "never set" not in proc.stderr, proc.stderr
