"""With op_cost:median the remat cost the policy scores is the median of the last runs of
ops with the same operator, shapes and scalars, not the op's own time (Note [Noisy op
times] in eviction/op_costs.cpp; the default, op_cost:measured, scores each op's own time).
A trace shows it: TIME is what the op took, REMAT_TIME the estimate where it differs."""
import json

from conftest import PYTHON, clean_env, run

# Two signatures of one operator, interleaved: aten::mul on a small and on a large tensor.
SCRIPT = """
import torch
small = torch.randn(64, 64)
big = torch.randn(512, 1024)
for i in range(9):
    a = small * 1.5
    b = big * 1.5
"""
WINDOW = 5  # OpCosts::kWindow


def mul_calls(trace):
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    size = {e["NAME"]: int(e["MEMORY"]) for e in events if e["INSTRUCTION"] == "MEMORY"}
    calls = [e for e in events if e["INSTRUCTION"] == "CALL" and e["NAME"] == "aten::mul"]
    return calls, [size[c["RESULT"][0]] for c in calls]


def test_remat_cost_is_the_median_of_the_signatures_last_runs(lib, tmp_path):
    trace = tmp_path / "median.trace"
    proc = run([PYTHON, "-c", SCRIPT],
               clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace},op_cost:median"))
    assert "dtr: wrote trace" in proc.stderr, proc.stderr
    calls, sizes = mul_calls(trace)
    assert sorted(set(sizes)) == [64 * 64 * 4, 512 * 1024 * 4] and len(calls) == 18, sizes
    for size in set(sizes):
        times = []  # this signature's runs so far, by the trace's TIME
        for call, s in zip(calls, sizes):
            if s != size:
                continue
            times.append(call["TIME"])
            window = sorted(times[-WINDOW:])
            expected = window[(len(window) - 1) // 2]
            # REMAT_TIME is written only where the estimate differs from the op's own time;
            # with one shared window for both shapes, these would not hold.
            assert call.get("REMAT_TIME", call["TIME"]) == expected, (size, times, call)


def test_measured_op_cost_scores_each_ops_own_time(lib, tmp_path):
    trace = tmp_path / "measured.trace"  # op_cost:measured, the default
    run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}"))
    calls, _ = mul_calls(trace)
    assert len(calls) == 18
    assert not [c for c in calls if "REMAT_TIME" in c]
