"""torch.distributed: a 2-process DDP run (gloo on loopback), each rank under a budget
below its peak, trains exactly as the same run without dtr; collectives are never
recomputed (non-aten ops are opaque: Note [Never recompute])."""
import json
import socket
import subprocess

import pytest

from conftest import PYTHON, SCRIPTS, Result, clean_env, driver, run


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(extra_env):
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = clean_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=port, **extra_env)
        env["OMP_NUM_THREADS"] = "1"
        procs.append(subprocess.Popen(driver("ddp.py", "--steps", "3"), env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results.append(Result(subprocess.CompletedProcess(p.args, 0, out, err)))
    return results


@pytest.fixture(scope="module")
def plain():
    return run_ddp({})


@pytest.fixture(scope="module")
def budget(lib):
    free = run_ddp({"LD_PRELOAD": lib, "DTR_CONF": "remat:False"})
    peak = max(r.stats["allocated_bytes.all.peak"] for r in free)
    return int(peak * 0.8)


def test_ddp_under_budget_is_bit_identical(lib, plain, budget):
    under = run_ddp({"LD_PRELOAD": lib, "DTR_CONF": f"budget:{budget}"})
    for rank in range(2):
        assert under[rank].losses() == plain[rank].losses()
        assert under[rank].params() == plain[rank].params()
        assert under[rank].buffers() == plain[rank].buffers()
        stats = under[rank].stats
        assert stats["allocated_bytes.all.peak"] <= budget
        assert stats["dtr.num_evictions"] > 0, stats
    # DDP keeps the ranks' parameters equal.
    assert plain[0].params() == plain[1].params()


def test_torchrun_under_dtr_run_is_bit_identical(dtr_run, plain, budget, tmp_path):
    # The way users start DDP: `dtr-run --budget B -- torchrun ... ddp.py`. torchrun's
    # workers are new Python processes; each gets the library through the preload shim
    # with its own budget (Note [Preload shim] in integration/torch/process_kind.cpp) and
    # trains exactly as the plain run's rank. Until 2026-11-28 they ran without it.
    env = clean_env(OMP_NUM_THREADS="1")
    # Each rank's stdout goes to its log (and, `--tee`, to ours); the reports come on the
    # common stderr. Both flags spell every rank out: torch 1.13 under Python 3.11 cannot
    # read a plain "0" or "3" (its Std flag lookup returns None for them).
    proc = run([dtr_run, "--budget", str(budget), "--report", "--", PYTHON, "-m",
                "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "--log_dir", str(tmp_path), "--redirects", "0:1,1:1", "--tee", "0:1,1:1",
                str(SCRIPTS / "ddp.py"), "--steps", "3"], env)
    for rank in range(2):
        logs = list(tmp_path.glob(f"*/attempt_0/{rank}/stdout.log"))
        assert len(logs) == 1, list(tmp_path.rglob("*"))
        worker = Result(subprocess.CompletedProcess([], 0, logs[0].read_text(), ""))
        assert worker.losses() == plain[rank].losses()
        assert worker.params() == plain[rank].params()
        assert worker.buffers() == plain[rank].buffers()
    reports = [json.loads(l[len("dtr: report "):]) for l in proc.stderr.splitlines()
               if l.startswith("dtr: report ")]
    # The two workers and torchrun's agent (a Python process too, which runs no op).
    assert len(reports) == 3, proc.stderr[-3000:]
    workers = [r for r in reports if r["dtr.num_ops"] > 0]
    assert len(workers) == 2 and len({r["pid"] for r in reports}) == 3, reports
    for report in workers:
        assert report["budget_bytes"] == budget
        assert 0 < report["allocated_bytes.all.peak"] <= budget
        assert report["dtr.num_evictions"] > 0, report
