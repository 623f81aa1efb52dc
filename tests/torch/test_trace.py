"""DTR_TRACE: a live run records its ops in our trace format, and dtr-sim replays the
recorded step under a budget (docs/torch.md, Note [Recording a trace])."""
import json
import os
from pathlib import Path

from conftest import Result, clean_env, driver, run, ROOT

ARGS = ("mlp.py", "--steps", "2", "--batch", "512", "--depth", "6", "--width", "256")


def dtr_sim():
    return Path(os.environ.get("DTR_SIM", ROOT / "build" / "bin" / "dtr-sim"))


def test_recorded_trace_replays_in_the_simulator(lib, tmp_path):
    trace = tmp_path / "mlp.trace"
    live = Result(run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF=f"trace:{trace}")))
    assert trace.exists(), live.proc.stderr
    assert "dtr: wrote trace" in live.proc.stderr
    first = trace.read_text().splitlines()[0]
    assert json.loads(first)["INSTRUCTION"] == "DTR_TRACE"
    ops = live.stats["dtr.num_ops"]
    # The simulator reads it back and replays it with no budget, and under half its peak.
    full = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "1.0",
                           "--json"], clean_env()).stdout)
    assert full["status"] == "ok"
    assert full["stats"]["dtr.num_ops"] >= ops
    half = json.loads(run([str(dtr_sim()), "run", "--trace", str(trace), "--budget", "0.5",
                           "--json", "--allocator", "none"], clean_env()).stdout)
    assert half["status"] in ("ok", "oom", "thrash")
    assert half["stats"]["dtr.num_ops"] >= 1
