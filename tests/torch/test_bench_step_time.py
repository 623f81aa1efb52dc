"""bench/torch_step_time.py --against times each budget configuration under another build
of the library too, interleaved with the others, as a row of its own marked 'against'
(docs/pytorch.md, "Speed"). Here the other build is the same library: the point is that
both rows come out, each with its own measured step time and remats."""
import os
import re
import subprocess

from conftest import PYTHON, ROOT


def test_against_times_another_build_in_the_same_rounds(lib):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTR_") and k != "LD_PRELOAD"}
    env["DTR_LIBRARY"] = lib  # python/dtr/runs.py's library
    proc = subprocess.run(
        [PYTHON, str(ROOT / "bench" / "torch_step_time.py"), "--threads", "1", "--steps", "3",
         "--rounds", "1", "--fractions", "0.5", "--scripts", "transformer", "--against", lib],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"round 1/1: plain [\d.]+ s, dtr [\d.]+ s, dtr 0\.5x [\d.]+ s, "
                     r"dtr 0\.5x against [\d.]+ s", proc.stdout), proc.stdout
    rows = [l for l in proc.stdout.splitlines() if l.startswith("| transformer |")]
    assert len(rows) == 2, proc.stdout
    assert "(0.5x: " in rows[0] and ", against)" not in rows[0], rows
    assert ", against)" in rows[1], rows
    for row in rows:  # both ran under the budget: remats counted for each
        remats = int(row.split("|")[8])  # after the mean-step ratio
        assert remats > 0, row
