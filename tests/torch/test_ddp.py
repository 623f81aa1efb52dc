"""torch.distributed: a 2-process DDP run (gloo on loopback), each rank under a budget
below its peak, trains exactly as the same run without dtr; collectives are never
recomputed (non-aten ops are opaque: Note [Never recompute])."""
import socket
import subprocess

from conftest import Result, clean_env, driver


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


def test_ddp_under_budget_is_bit_identical(lib):
    plain = run_ddp({})
    free = run_ddp({"LD_PRELOAD": lib, "DTR_CONF": "remat:False"})
    peak = max(r.stats["allocated_bytes.all.peak"] for r in free)
    budget = int(peak * 0.8)
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
