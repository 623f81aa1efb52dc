"""Notes [Outputs at exit] and [Outputs at SIGTERM] (integration/torch/exit_writers.cpp): a
run stopped by Ctrl-C or by SIGTERM writes its report, trace, timeline and snapshot, as a
run that ends does. They were C atexit handlers, and Python ends an uncaught
KeyboardInterrupt by killing itself with SIGINT after finalizing (status 130, no file, no
word: the seventy-fifth session's probe), and SIGTERM's default action ends a process
without exit. The signal is sent as a terminal sends Ctrl-C, to the whole process
group."""
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


def interrupted(args, env, tmp_path, signum=signal.SIGINT):
    proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert first.strip() == "READY", (first, proc.stderr.read() if proc.poll() else "")
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
@pytest.mark.parametrize("how", ["ld_preload", "dtr_run", "dtr_load"])
def test_a_stopped_run_writes_every_output(lib, dtr_run, tmp_path, how, signum):
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
    status, err = interrupted(args, env, tmp_path, signum)
    # Python's own way out of an uncaught KeyboardInterrupt, and SIGTERM sent again after
    # the writers: the parent sees the signal it would see without dtr (dtr-run execs).
    assert status == -signum, (status, err)
    assert ("KeyboardInterrupt" in err) == (signum == signal.SIGINT), err
    assert err.count("dtr: report {") == 1, err
    report = next(line for line in err.splitlines() if line.startswith("dtr: report"))
    assert '"dtr.num_ops":0' not in report, report
    for var, name in outputs.items():
        path = tmp_path / name
        assert path.exists() and path.stat().st_size > 0, (name, err)
        assert f"dtr: wrote {kinds[var]} {path}" in err, (name, err)


# Note [Outputs at SIGTERM]: the handler goes in only where SIGTERM's disposition is the
# default, and a forked child gets the default back (a child must die at Pool.terminate
# without waiting on writers, and writes nothing at SIGTERM, as before).
DISPOSITIONS = r"""
import os, signal, sys, time, torch
mine = lambda signum, frame: None
if sys.argv[1] == "own":
    signal.signal(signal.SIGTERM, mine)
elif sys.argv[1] == "ignored":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
torch.ones(4).add_(1)
def name(handler):
    return {id(mine): "mine", id(signal.SIG_IGN): "SIG_IGN",
            id(signal.SIG_DFL): "SIG_DFL"}.get(id(handler), getattr(handler, "__name__", "?"))
print("HANDLER", name(signal.getsignal(signal.SIGTERM)), flush=True)
if sys.argv[1] == "default":
    pid = os.fork()
    if pid == 0:
        print("CHILD", name(signal.getsignal(signal.SIGTERM)), flush=True)
        torch.ones(4).add_(1)
        time.sleep(60)
        os._exit(0)
    time.sleep(1)
    os.kill(pid, signal.SIGTERM)
    print("CHILD STATUS", os.waitpid(pid, 0)[1], flush=True)
"""


def test_sigterm_handler_only_where_the_default_stood(lib, tmp_path):
    env = clean_env(LD_PRELOAD=lib, DTR_REPORT="1", DTR_TRACE=str(tmp_path / "run.trace"))
    runs = {}
    for case in ("default", "own", "ignored"):
        proc = subprocess.run([PYTHON, "-c", DISPOSITIONS, case], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (case, proc.stdout, proc.stderr)
        runs[case] = proc
    assert "HANDLER dtr_write_outputs_then_terminate" in runs["default"].stdout
    assert "HANDLER mine" in runs["own"].stdout
    assert "HANDLER SIG_IGN" in runs["ignored"].stdout
    # The child had the default back, died by the signal at once, and wrote nothing.
    default = runs["default"]
    assert "CHILD SIG_DFL" in default.stdout, default.stdout
    assert f"CHILD STATUS {signal.SIGTERM}" in default.stdout, default.stdout
    assert default.stderr.count("dtr: report {") == 1, default.stderr
    assert list(tmp_path.glob("run.trace.*")) == [], list(tmp_path.iterdir())
