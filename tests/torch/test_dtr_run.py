"""build/bin/dtr-run: preloads the library for a command, with flags as DTR_<NAME> variables."""
import json

from conftest import PYTHON, Result, clean_env, driver, run

MLP = ("mlp.py", "--steps", "3")


def test_dtr_run_end_to_end(lib, dtr_run):
    baseline = Result(run(driver(*MLP), clean_env()))
    proc = run([dtr_run, "--budget", "64M", "--report", "--", *driver(*MLP)], clean_env())
    result = Result(proc)
    assert result.losses() == baseline.losses() and result.params() == baseline.params()
    assert result.enabled
    assert result.stats["allocation.all.allocated"] > 0
    assert 0 < result.stats["allocated_bytes.all.peak"] <= 64 * 2**20
    # The library handed LD_PRELOAD to the shim beside it (Note [Preload shim]).
    assert result.facts["ld_preload"].endswith("/libdtr_preload.so"), result.facts
    report = next(l for l in proc.stderr.splitlines() if l.startswith("dtr: report "))
    assert json.loads(report[len("dtr: report "):])["budget_bytes"] == 64 * 2**20


def test_dtr_run_wrappers_load_no_torch(lib, dtr_run):
    # dtr-run preloads the shim (Note [Preload shim]): a shell in front of Python maps no
    # libtorch (it did, 1.3 s of loading, when dtr-run preloaded the library itself), and
    # the Python behind it still runs under dtr.
    script = "grep -c -e /libtorch -e /libc10 /proc/$$/maps; " \
             f"{PYTHON} -c 'import torch, dtr; print(\"enabled\", dtr.is_enabled())'"
    proc = run([dtr_run, "--budget", "64M", "--", "bash", "-c", script], clean_env(),
               check=False)
    assert proc.stdout.splitlines() == ["0", "enabled True"], proc


def test_dtr_run_is_a_fresh_start(lib, dtr_run, tmp_path):
    # Started inside a child of a dtr process (DTR_PARENT_PID set), the command still
    # writes the trace it is given, not `<path>.<pid>` (Note [Files of child processes]).
    trace = tmp_path / "run.trace"
    run([dtr_run, "--", *driver("mlp.py", "--steps", "1")],
        clean_env(DTR_PARENT_PID="1", DTR_TRACE=str(trace)))
    assert [p.name for p in tmp_path.iterdir()] == ["run.trace"]


def test_dtr_run_budget_is_enforced(lib, dtr_run):
    script = ("import torch\ntry:\n    torch.empty(2**20)\nexcept RuntimeError as e:\n"
              "    print('OOM', 'budget of 1.00 MiB' in str(e))\n")
    proc = run([dtr_run, "--budget", "1M", "--", PYTHON, "-c", script], clean_env())
    assert "OOM True" in proc.stdout
    # Note [Flags win]: over an inherited DTR_CONF and DTR_BUDGET alike (the variable beat
    # the flag, which went into DTR_CONF, without a word).
    proc = run([dtr_run, "--budget", "1M", "--", PYTHON, "-c", script],
               clean_env(DTR_BUDGET="64M", DTR_CONF="budget:32M"))
    assert "OOM True" in proc.stdout, proc.stdout + proc.stderr
    proc = run([dtr_run, "--budget", "1M", "--conf", "policy:msps", "--report", "--",
                PYTHON, "-c", "import torch; torch.ones(10) * 2"],
               clean_env(DTR_POLICY="lru", DTR_REPORT="0"))
    report = next(l for l in proc.stderr.splitlines() if l.startswith("dtr: report "))
    report = json.loads(report[len("dtr: report "):])
    assert (report["budget_bytes"], report["dtr.policy"]) == (2**20, "msps"), report


def test_dtr_run_reserved_limit_is_enforced(lib, dtr_run):
    script = ("import torch\ntry:\n    torch.empty(4 * 2**20)\nexcept RuntimeError as e:\n"
              "    print('OOM', 'reserved limit of 8.00 MiB' in str(e))\n")
    proc = run([dtr_run, "--reserved-limit", "8M", "--", PYTHON, "-c", script], clean_env())
    assert "OOM True" in proc.stdout, proc.stdout + proc.stderr


def test_dtr_run_exit_status_is_the_commands(dtr_run):
    proc = run([dtr_run, "--", PYTHON, "-c", "raise SystemExit(7)"], clean_env(), check=False)
    assert proc.returncode == 7


def test_dtr_run_bad_flags_exit_2(dtr_run):
    ran = [PYTHON, "-c", "print('ran')"]
    for args in (["--budget", "lots", "--", "true"], ["--no-such-flag", "--", "true"],
                 ["--conf", "bogus:1", "--", "true"],
                 ["--reserved-limit", "0.5", "--", "true"], [],
                 # checked before the command starts, not at its first `import torch`
                 ["--policy", "nope", "--", *ran], ["--conf", "search:nope", "--", *ran],
                 # a comma in a flag's value no longer smuggles in another option
                 ["--budget", "1M", "--policy", "dtr_eq,budget:0", "--", *ran],
                 ["--budget", "1M", "--svg", "/no/such/dir/x.svg", "--", *ran],
                 # an empty DTR_<NAME> counts as unset: it would lose to DTR_CONF
                 ["--conf", "budget:", "--", *ran], ["--budget", "", "--", *ran]):
        proc = run([dtr_run, *args], clean_env(), check=False)
        assert proc.returncode == 2 and "ran" not in proc.stdout, (args, proc.stdout, proc.stderr)
    proc = run([dtr_run, "--", *ran], clean_env(DTR_POLICY="nope"), check=False)
    assert proc.returncode == 2 and "unknown policy 'nope'" in proc.stderr, proc.stderr


def test_dtr_run_takes_a_ratio_budget(lib, dtr_run):
    """--budget 0.5x: half the peak over the first two training steps, set from then on
    (Note [Ratio budgets]); mlp.py trains as without the library."""
    steps = ("mlp.py", "--steps", "5", "--depth", "12", "--width", "256", "--batch", "4096")
    baseline = Result(run(driver(*steps), clean_env()))
    proc = run([dtr_run, "--budget", "0.5x", "--", *driver(*steps)], clean_env())
    result = Result(proc)
    assert result.losses() == baseline.losses() and result.params() == baseline.params()
    assert "dtr: budget 0.5x of the peak over the first 2 training steps" in proc.stderr
    assert result.stats["dtr.num_evictions"] > 0, result.stats
