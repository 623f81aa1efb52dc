"""Note [Outputs at exit] (integration/torch/exit_writers.cpp): a run stopped by Ctrl-C
writes its report, trace, timeline and snapshot, as a run that ends does. They were C
atexit handlers, and Python ends an uncaught KeyboardInterrupt by killing itself with
SIGINT after finalizing: status 130, no file, no word (the seventy-fifth session's probe).
Ctrl-C is sent as a terminal sends it, to the whole process group."""
import os
import signal
import subprocess

import pytest

from conftest import PYTHON, clean_env

LOOP = """
import sys, torch
{load}
w = torch.randn(128, 128, requires_grad=True)
for step in range(10**9):
    (torch.randn(32, 128) @ w).relu().sum().backward()
    if step == 3:
        print("READY", flush=True)
"""


def interrupted(args, env, tmp_path):
    proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert first.strip() == "READY", (first, proc.stderr.read() if proc.poll() else "")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


@pytest.mark.parametrize("how", ["ld_preload", "dtr_run", "dtr_load"])
def test_ctrl_c_writes_every_output(lib, dtr_run, tmp_path, how):
    outputs = {"DTR_TRACE": "run.trace", "DTR_TIMELINE": "run.timeline.json",
               "DTR_SNAPSHOT": "run.snapshot.pickle"}
    kinds = {"DTR_TRACE": "trace", "DTR_TIMELINE": "timeline", "DTR_SNAPSHOT": "snapshot"}
    env = clean_env(DTR_REPORT="1", DTR_BUDGET="64M", **outputs)
    load = "import dtr; dtr.load()" if how == "dtr_load" else ""
    args = [PYTHON, "-c", LOOP.format(load=load)]
    if how == "ld_preload":
        env["LD_PRELOAD"] = lib
    elif how == "dtr_run":
        args = [dtr_run, "--"] + args
    status, err = interrupted(args, env, tmp_path)
    # Python's own way out of an uncaught KeyboardInterrupt (dtr-run execs the command).
    assert status == -signal.SIGINT, (status, err)
    assert "KeyboardInterrupt" in err, err
    assert err.count("dtr: report {") == 1, err
    report = next(line for line in err.splitlines() if line.startswith("dtr: report"))
    assert '"dtr.num_ops":0' not in report, report
    for var, name in outputs.items():
        path = tmp_path / name
        assert path.exists() and path.stat().st_size > 0, (name, err)
        assert f"dtr: wrote {kinds[var]} {path}" in err, (name, err)
