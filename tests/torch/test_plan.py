"""DTR_PLAN: the live runtime follows a static plan made by dtr-plan from a trace that an
earlier run of the same script recorded (DTR_TRACE); Note [Warm start in PyTorch] in
integration/torch/lineage.cpp, docs/pytorch.md "Warm start"."""
import json
import os
from pathlib import Path

import pytest

from conftest import Result, clean_env, driver, run, ROOT

# A CNN with BatchNorm, Dropout and in-place ReLU, two steps: the trace's length.
ARGS = ("cnn.py", "--steps", "2", "--batch", "8", "--size", "48")


def dtr_plan():
    path = Path(os.environ.get("DTR_PLAN_TOOL", ROOT / "build" / "bin" / "dtr-plan"))
    if not path.exists():
        pytest.skip(f"{path} is not built (cmake --build <dir> --target dtr-plan)")
    return str(path)


@pytest.fixture(scope="module")
def planned(lib, tmp_path_factory):
    """A recorded trace, the baseline peak, and a chen plan for 0.7 of it."""
    d = tmp_path_factory.mktemp("plan")
    trace = d / "cnn.trace"
    run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    baseline = Result(run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    peak = baseline.stats["allocated_bytes.all.peak"]
    budget = int(0.7 * peak)
    plan = d / "chen.json"
    run([dtr_plan(), "--trace", str(trace), "--budget", str(budget), "--method", "chen",
         "--out", str(plan)], clean_env())
    assert json.loads(plan.read_text())["trace"]["file"] == "cnn.trace"
    plain = Result(run(driver(*ARGS), clean_env()))
    return {"dir": d, "trace": trace, "plan": plan, "budget": budget, "plain": plain}


def report(proc):
    lines = [l for l in proc.stderr.splitlines() if l.startswith("dtr: report ")]
    assert lines, proc.stderr
    return json.loads(lines[-1][len("dtr: report "):])


def test_the_run_follows_the_plan(lib, planned):
    # The plan names its trace, found next to it (no plan_trace).
    conf = f"budget:{planned['budget']},plan:{planned['plan']}"
    proc = run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF=conf, DTR_REPORT="1"))
    warm, summary = Result(proc), report(proc)
    plain = planned["plain"]
    assert warm.losses() == plain.losses()
    assert warm.params() == plain.params() and warm.buffers() == plain.buffers()
    assert summary["dtr.plan"] == "chen.json (chen)"
    assert summary["dtr.plan_departure"] == "", summary  # the same program, node for node
    assert summary["dtr.num_plan_drops"] > 0, summary
    assert summary["dtr.num_remats"] > 0, summary  # it recomputed what the plan drops
    assert summary["allocated_bytes.all.peak"] <= planned["budget"]


def test_a_longer_run_leaves_the_plan_and_goes_on(lib, planned):
    # Three steps against a two-step trace: the guide stops at the first storage past the
    # plan, the policy carries on, and the results are still those of plain PyTorch.
    args = list(ARGS)
    args[args.index("--steps") + 1] = "3"
    conf = f"budget:{planned['budget']},plan:{planned['plan']},plan_trace:{planned['trace']}"
    proc = run(driver(*args), clean_env(LD_PRELOAD=lib, DTR_CONF=conf, DTR_REPORT="1"))
    summary = report(proc)
    assert "past the plan's" in summary["dtr.plan_departure"], summary
    assert summary["dtr.num_plan_drops"] > 0
    plain = Result(run(driver(*args), clean_env()))
    assert Result(proc).losses() == plain.losses()
    assert Result(proc).params() == plain.params()


def test_a_plan_that_cannot_be_followed_stops_the_process(lib, planned, tmp_path):
    missing = run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_PLAN=str(tmp_path / "no.json")),
                  check=False)
    assert missing.returncode == 2
    assert "dtr: option plan:" in missing.stderr and "no.json" in missing.stderr

    # The plan without its trace next to it: the message says how to give it.
    moved = tmp_path / "chen.json"
    moved.write_text(planned["plan"].read_text())
    alone = run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_PLAN=str(moved)), check=False)
    assert alone.returncode == 2
    assert "cnn.trace" in alone.stderr and "plan_trace" in alone.stderr

    # A trace of another program (another batch size): refused, naming both.
    other = tmp_path / "other.trace"
    args = list(ARGS)
    args[args.index("--batch") + 1] = "4"
    run(driver(*args), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{other}"))
    wrong = run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_PLAN=str(planned["plan"]),
                                         DTR_PLAN_TRACE=str(other)), check=False)
    assert wrong.returncode == 2
    assert "plan for another trace" in wrong.stderr, wrong.stderr
    assert "loss" not in wrong.stdout  # nothing ran
