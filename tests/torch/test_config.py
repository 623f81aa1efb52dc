"""A bad configuration stops the process at start, with the reason and the valid keys."""
from conftest import PYTHON, clean_env, run

VALID_KEYS = ("budget", "policy", "report")


def assert_fails_at_start(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "STARTED" not in proc.stdout  # nothing of the script ran
    assert "valid keys" in proc.stderr
    for key in VALID_KEYS:
        assert key in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_unknown_key_under_ld_preload(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300M,bogus:1"), check=False)
    assert_fails_at_start(proc, "bogus")


def test_bad_value_under_ld_preload(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_BUDGET="lots"), check=False)
    assert_fails_at_start(proc, "lots")


def test_ratio_limits_the_live_runtime_cannot_set_are_refused(lib):
    """A ratio budget is set after the first steps (Note [Ratio budgets]), which needs the
    lineage; a reserved limit takes bytes only."""
    for conf in ("budget:0.5,remat:False", "budget:300M,reserved_limit:0.5x"):
        proc = run([PYTHON, "-c", "print('STARTED')"],
                   clean_env(LD_PRELOAD=lib, DTR_CONF=conf), check=False)
        assert_fails_at_start(proc, "ratio")


def test_simulator_only_option_is_refused_by_the_live_runtime(lib):
    """lazy_release models this runtime in dtr-sim (Note [Lazy release]); here it would
    mean nothing, so it stops the start rather than being silently ignored."""
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300M,lazy_release:True"), check=False)
    assert_fails_at_start(proc, "lazy_release", "dtr-sim")


def test_bad_op_cost_fails_at_start(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300M,op_cost:mean"), check=False)
    assert_fails_at_start(proc, "op_cost", "median, measured")


def test_unknown_key_at_load_library(lib):
    script = ("import torch\nprint('IMPORTED')\n"
              f"torch.ops.load_library({lib!r})\nprint('STARTED')\n")
    proc = run([PYTHON, "-c", script], clean_env(DTR_CONF="polcy:dtr_eq"), check=False)
    assert "IMPORTED" in proc.stdout
    assert_fails_at_start(proc, "polcy")


def test_good_config_starts(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300M,policy:dtr_eq"))
    assert "STARTED" in proc.stdout


def test_bad_on_thrash_fails_at_start(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300M,on_thrash:stop"), check=False)
    assert_fails_at_start(proc, "on_thrash", "warn, raise")


def test_bad_trial_fails_at_start(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:300M,trial:both"), check=False)
    assert_fails_at_start(proc, "trial", "replay, live")


def test_bad_trace_constants_fails_at_start(lib):
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_CONF="trace_constants:early"), check=False)
    assert_fails_at_start(proc, "trace_constants", "read, allocated")


def test_a_bad_size_fails_at_start(lib):
    """min_evictable takes bytes (Note [Small storages]): no ratio, no "unlimited"."""
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_MIN_EVICTABLE="0.5x"), check=False)
    assert_fails_at_start(proc, "min_evictable", "expected a size")


def test_options_the_host_never_read_fail_at_start(lib):
    """Note [Option choices]: `allocator` (the simulator's) ran here without a word; and the
    policy is checked with remat:False too, which uses none."""
    for env in ({"DTR_ALLOCATOR": "nope"}, {"DTR_REMAT": "False", "DTR_POLICY": "nope"},
                {"DTR_REMAT": "False", "DTR_SEARCH": "nope"}):
        proc = run([PYTHON, "-c", "print('STARTED')"], clean_env(LD_PRELOAD=lib, **env),
                   check=False)
        assert_fails_at_start(proc, "nope")


def test_output_paths_fail_at_start(lib, tmp_path):
    """Note [Output paths at start]: a trace, timeline or snapshot that cannot be written
    stopped nothing; the run trained, then said so at exit, with status 0."""
    for env in ({"DTR_TRACE": str(tmp_path / "no" / "such.trace")},
                {"DTR_TIMELINE": str(tmp_path)},
                {"DTR_SNAPSHOT": "/proc/no-such/snapshot.pickle"},
                {"DTR_TRACE": str(tmp_path / "a"), "DTR_TIMELINE": str(tmp_path / "a")}):
        proc = run([PYTHON, "-c", "print('STARTED')"], clean_env(LD_PRELOAD=lib, **env),
                   check=False)
        assert_fails_at_start(proc, "cannot write" if len(env) == 1 else "is written there too")
    assert list(tmp_path.iterdir()) == []
    # Nor over the plan the run follows (Note [Outputs that are inputs]).
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_PLAN=str(plan), DTR_TIMELINE=str(plan)),
               check=False)
    assert_fails_at_start(proc, "it is the plan (option plan) this command reads")
    assert plan.read_text() == "{}"


def test_a_relative_output_path_is_where_the_run_started(lib, tmp_path):
    """Note [Output paths at start]: taken against the working directory at exit, the
    trace followed the script's chdir."""
    (tmp_path / "sub").mkdir()
    script = "import os, torch\nos.chdir('sub')\nx = torch.ones(3) * 2\n"
    proc = run([PYTHON, "-c", script], clean_env(LD_PRELOAD=lib, DTR_TRACE="run.trace"),
               cwd=tmp_path)
    assert (tmp_path / "run.trace").exists(), proc.stderr
    assert f"wrote trace {tmp_path / 'run.trace'}" in proc.stderr
    assert list((tmp_path / "sub").iterdir()) == []


def test_a_blank_variable_counts_as_unset(lib):
    """docs/config.md: an empty DTR_<NAME>, or one of whitespace only, is unset; a blank
    DTR_BUDGET dropped DTR_CONF's budget without a word."""
    script = "import torch, dtr\nprint('BUDGET', dtr.get_budget())\n"
    proc = run([PYTHON, "-c", script],
               clean_env(LD_PRELOAD=lib, DTR_CONF="budget:10M", DTR_BUDGET=" "))
    assert f"BUDGET {10 * 2**20}" in proc.stdout, proc.stdout + proc.stderr


def test_a_plan_trace_without_a_plan_fails_at_start(lib, tmp_path):
    """plan_trace names the trace a plan was made from; alone it was ignored silently."""
    proc = run([PYTHON, "-c", "print('STARTED')"],
               clean_env(LD_PRELOAD=lib, DTR_PLAN_TRACE=str(tmp_path / "t.trace")), check=False)
    assert_fails_at_start(proc, "plan_trace", "set plan (DTR_PLAN) too")


def test_a_child_in_another_directory_writes_beside_its_parent(lib, tmp_path):
    """Note [Output paths at start]: the parent hands its paths on absolute. Taken against
    its own directory, a child started in `sub/` (which has no `out/`) failed at start."""
    (tmp_path / "out").mkdir()
    (tmp_path / "sub").mkdir()
    child = "import torch; x = torch.ones(3) * 2"
    parent = ("import subprocess, sys, torch\nx = torch.ones(3) * 2\n"
              f"subprocess.run([sys.executable, '-c', {child!r}], cwd='sub', check=True)\n")
    proc = run([PYTHON, "-c", parent], clean_env(LD_PRELOAD=lib, DTR_TRACE="out/rel.trace"),
               cwd=tmp_path)
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written[0] == "rel.trace" and len(written) == 2, (written, proc.stderr)
    assert written[1].startswith("rel.trace."), written
    assert list((tmp_path / "sub").iterdir()) == []


def test_a_bad_option_under_dtr_load_raises_and_a_fixed_one_starts(lib, tmp_path):
    """Note [Bad configuration]: under dtr.load() the process is already running (perhaps a
    notebook's kernel); exit(2) ended it with no `finally` run and nothing to catch. Now
    DtrError says why, the library stays off, and load() after the fix starts it."""
    script = f"""
import os, torch, dtr
for bad in ("budget:300M,bogus:1", "budget:300M,trace:{tmp_path}/no/such.trace"):
    os.environ["DTR_CONF"] = bad
    try:
        dtr.load()
    except dtr.DtrError as e:
        print("RAISED", bad, "|", str(e).replace(chr(10), " "))
    finally:
        print("FINALLY")
    print("ENABLED", dtr.is_enabled(), "LEFT", os.environ.get("DTR_LOAD_RAISES"))
    try:
        dtr.memory_stats()
    except dtr.DtrError as e:
        print("STATS RAISED", "valid keys" in str(e))
os.environ["DTR_CONF"] = "budget:300M,report:True"
print("PATH", dtr.load())
print("ENABLED", dtr.is_enabled(), "BUDGET", dtr.get_budget())
x = torch.randn(256, 256)
print("SUM", float((x @ x).sum()) == float((x @ x).sum()))
"""
    proc = run([PYTHON, "-c", script], clean_env(DTR_LIBRARY=lib), cwd=tmp_path)
    out = proc.stdout
    assert out.count("FINALLY") == 2, out + proc.stderr
    assert "RAISED budget:300M,bogus:1 | dtr: " in out and "bogus" in out
    assert f"RAISED budget:300M,trace:{tmp_path}/no/such.trace | " in out
    for line in out.splitlines():
        if line.startswith("RAISED"):
            assert "valid keys: budget" in line and "call dtr.load() again" in line, line
    assert out.count("ENABLED False LEFT None") == 2, out
    assert out.count("STATS RAISED True") == 2, out
    assert f"ENABLED True BUDGET {300 * 2**20}" in out, out
    assert "SUM True" in out
    assert '"budget_bytes":314572800' in proc.stderr, proc.stderr  # the report at exit
    assert "dtr: " not in proc.stderr.replace("dtr: report", ""), proc.stderr


def test_an_inherited_load_raises_variable_does_not_stop_the_exit(lib):
    """DTR_LOAD_RAISES counts only with the loading process's own pid: left set, or handed
    to a child, it must not turn LD_PRELOAD's exit(2) into a library silently off."""
    for value in ("1", "0", str(2**22 + 17)):
        proc = run([PYTHON, "-c", "print('STARTED')"],
                   clean_env(LD_PRELOAD=lib, DTR_CONF="bogus:1", DTR_LOAD_RAISES=value),
                   check=False)
        assert_fails_at_start(proc, "bogus")
    # A child handed its parent's own pid, as a variable left set by a parent would be.
    parent = ("import os, subprocess, sys\n"
              "env = dict(os.environ, DTR_LOAD_RAISES=str(os.getpid()), LD_PRELOAD=sys.argv[1],\n"
              "           DTR_CONF='bogus:1')\n"
              "child = subprocess.run([sys.executable, '-c', \"print('STARTED')\"], env=env,\n"
              "                       capture_output=True, text=True)\n"
              "print('CHILD', child.returncode, 'STARTED' in child.stdout)\n"
              "print(child.stderr)\n")
    proc = run([PYTHON, "-c", parent, lib], clean_env())
    assert "CHILD 2 False" in proc.stdout and "bogus" in proc.stdout, proc.stdout + proc.stderr
