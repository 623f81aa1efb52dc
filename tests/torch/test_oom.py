"""An allocation beyond the budget raises PyTorch's out-of-memory error, catchable in
Python, whose message names the budget; the process goes on afterwards."""
from conftest import PYTHON, clean_env, run

SCRIPT = r"""
import sys, torch
small = torch.ones(1000)                      # fits
try:
    big = torch.empty(2 * 1024 * 1024)        # 8 MiB > 4 MiB budget
except torch.cuda.OutOfMemoryError as e:      # c10::OutOfMemoryError; a RuntimeError
    assert isinstance(e, RuntimeError)
    print("OOM", str(e).splitlines()[0])
else:
    sys.exit("no out-of-memory error")
after = torch.ones(1000) + small              # still works
print("AFTER", float(after.sum()))
import dtr
print("NUM_OOMS", dtr.memory_stats()["num_ooms"])
"""


def test_allocation_beyond_budget_raises_catchable_oom(lib):
    proc = run([PYTHON, "-c", SCRIPT], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:4M"))
    out = proc.stdout
    assert "OOM " in out, out
    oom_line = next(l for l in out.splitlines() if l.startswith("OOM "))
    assert "budget of 4.00 MiB" in oom_line
    assert "tried to allocate 8.00 MiB" in oom_line
    assert "AFTER 2000.0" in out
    assert "NUM_OOMS 1" in out


TRAIN = r"""
import runpy, sys, torch
sys.argv = ["mlp.py", "--steps", "3"]
try:
    runpy.run_path(sys.argv_path, run_name="__main__")
except RuntimeError as e:
    print("CAUGHT", type(e).__name__, str(e).splitlines()[0])
"""


def test_training_under_too_small_budget_raises_in_python(lib):
    from conftest import SCRIPTS
    script = TRAIN.replace("sys.argv_path", repr(str(SCRIPTS / "mlp.py")))
    proc = run([PYTHON, "-c", script], clean_env(LD_PRELOAD=lib, DTR_CONF="budget:1M"))
    assert "CAUGHT OutOfMemoryError" in proc.stdout, proc.stdout + proc.stderr
    assert "budget of 1.00 MiB" in proc.stdout
    # Without the budget the same run trains.
    ok = run([PYTHON, "-c", script], clean_env(LD_PRELOAD=lib))
    assert "CAUGHT" not in ok.stdout and "loss 2 " in ok.stdout
