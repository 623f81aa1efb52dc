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


# Note [Outputs at SIGTERM]: the C handler goes in only where SIGTERM's disposition is the
# default, leaves Python's record of it at SIG_DFL (a framework that keeps a handler it
# finds, as Lightning does, chained to the first version's Python handler and died instead
# of saving its checkpoint), and a handler the program sets later wins. A forked child
# gets the default back and dies by SIGTERM at once, writing nothing, as before.
DISPOSITIONS = r"""
import os, signal, sys, time, torch
def caught():  # a C handler for SIGTERM, as the kernel sees it
    for line in open("/proc/self/status"):
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("CAUGHT BEFORE", caught(), flush=True)
torch.ones(4).add_(1)
print("CAUGHT AFTER", caught(), flush=True)
print("PYTHON SEES", {signal.SIG_DFL: "SIG_DFL", signal.SIG_IGN: "SIG_IGN"}.get(
    signal.getsignal(signal.SIGTERM), "other"), flush=True)
if sys.argv[1] == "default":
    pid = os.fork()
    if pid == 0:
        print("CHILD CAUGHT", caught(), flush=True)
        torch.ones(4).add_(1)
        time.sleep(60)
        os._exit(0)
    time.sleep(1)
    os.kill(pid, signal.SIGTERM)
    print("CHILD STATUS", os.waitpid(pid, 0)[1], flush=True)
elif sys.argv[1] == "own":
    def graceful(signum, frame):
        print("GRACEFUL", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, graceful)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
else:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
    print("SURVIVED", flush=True)
"""


def test_sigterm_handler_only_where_the_default_stood(lib, tmp_path):
    env = clean_env(LD_PRELOAD=lib, DTR_REPORT="1", DTR_TRACE=str(tmp_path / "run.trace"))
    runs = {}
    for case in ("default", "own", "ignored"):
        proc = subprocess.run([PYTHON, "-c", DISPOSITIONS, case], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (case, proc.stdout, proc.stderr)
        assert proc.stderr.count("dtr: report {") == 1, (case, proc.stderr)
        runs[case] = proc
    default = runs["default"].stdout
    assert "CAUGHT BEFORE False" in default and "CAUGHT AFTER True" in default, default
    assert "PYTHON SEES SIG_DFL" in default, default
    assert "CAUGHT AFTER False" in runs["ignored"].stdout, runs["ignored"].stdout
    assert "PYTHON SEES SIG_IGN" in runs["ignored"].stdout, runs["ignored"].stdout
    assert "SURVIVED" in runs["ignored"].stdout, runs["ignored"].stdout
    assert "GRACEFUL" in runs["own"].stdout, runs["own"].stdout
    # The child had the default back, died by the signal at once, and wrote nothing.
    assert "CHILD CAUGHT False" in default, default
    assert f"CHILD STATUS {signal.SIGTERM}" in default, default
    assert list(tmp_path.glob("run.trace.*")) == [], list(tmp_path.iterdir())


# Note [Outputs at SIGTERM]: a main thread blocked in C for good (here a future nobody
# completes; gloo waiting for a peer that crashed is another) never runs a Python handler:
# under the first version such a process no longer died at SIGTERM. The watcher thread
# writes and ends it.
BLOCKED_IN_C = """
import torch
w = torch.randn(64, 64, requires_grad=True)
(torch.randn(8, 64) @ w).relu().sum().backward()
print("READY", flush=True)
torch.futures.Future().wait()
"""


def test_sigterm_ends_a_main_thread_blocked_in_c(lib, tmp_path):
    env = clean_env(LD_PRELOAD=lib, DTR_REPORT="1", DTR_TRACE="run.trace")
    status, err = interrupted([PYTHON, "-c", BLOCKED_IN_C], env, tmp_path, signal.SIGTERM)
    assert status == -signal.SIGTERM, (status, err)
    assert err.count("dtr: report {") == 1, err
    assert f"dtr: wrote trace {tmp_path / 'run.trace'}" in err, err


# Note [Outputs at SIGTERM]: SIGTERM blocked while a checkpoint is saved waits for the save,
# as it does without dtr. The watcher thread once took it at once, and the process died
# with 5 of 20 chunks written (the review's repro). One OpenMP thread: a pool thread
# started before the block would take the signal, with or without dtr.
CHECKPOINT = """
import signal, sys, time, torch
torch.ones(4).add_(1)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
print("READY", flush=True)
with open("checkpoint.txt", "w") as f:
    for i in range(20):
        f.write(f"chunk {i}\\n")
        f.flush()
        time.sleep(0.1)
    f.write("COMPLETE\\n")
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
time.sleep(60)
"""


def test_sigterm_blocked_during_a_checkpoint_waits_for_it(lib, tmp_path):
    env = clean_env(LD_PRELOAD=lib, DTR_REPORT="1", OMP_NUM_THREADS="1")
    status, err = interrupted([PYTHON, "-c", CHECKPOINT], env, tmp_path, signal.SIGTERM)
    assert status == -signal.SIGTERM, (status, err)
    assert (tmp_path / "checkpoint.txt").read_text().endswith("COMPLETE\n"), err
    assert err.count("dtr: report {") == 1, err
