"""What a live run shows of itself (docs/observability.md): the Chrome-trace timeline
(DTR_TIMELINE), `dtr-run --svg`'s memory picture, and the memory snapshot (DTR_SNAPSHOT,
dtr.dump_snapshot) read by PyTorch's own readers."""
import collections
import functools
import json
import pickle
import subprocess
import xml.etree.ElementTree as ET

from conftest import PYTHON, Result, clean_env, driver, run, SCRIPTS

ARGS = ("mlp.py", "--steps", "2", "--depth", "12", "--width", "256", "--batch", "2048")
SVG = "{http://www.w3.org/2000/svg}"


@functools.lru_cache(maxsize=None)
def budget(lib):
    """0.7x the allocator-only peak of ARGS: a budget that evicts and rematerializes."""
    base = Result(run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF="remat:False")))
    return int(base.stats["allocated_bytes.all.peak"] * 0.7)


def check_chrome_trace(doc, budget_bytes):
    """The structure docs/observability.md promises; returns events by (ph, tid)."""
    assert doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    required = {"X": ("name", "ph", "ts", "dur", "pid", "tid"),
                "i": ("name", "ph", "ts", "s", "pid", "tid"),
                "C": ("name", "ph", "ts", "pid", "args"),
                "M": ("name", "ph", "pid", "args")}
    by = collections.defaultdict(list)
    for e in events:
        assert e["ph"] in required, e
        for key in required[e["ph"]]:
            assert key in e, (key, e)
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
        by[(e["ph"], e.get("tid"))].append(e)
    last = {}
    for e in events:  # counters are monotone in time, per counter
        if e["ph"] == "C":
            assert e["ts"] >= last.get(e["name"], float("-inf")), e
            last[e["name"]] = e["ts"]
    ops, remats = by[("X", 1)], by[("X", 2)]
    assert ops and remats and by[("i", 3)], {k: len(v) for k, v in by.items()}
    start = min(e["ts"] for e in ops)
    end = max(e["ts"] + e["dur"] for e in ops + remats)
    for r in remats:  # every remat inside the run, on its own track
        assert start <= r["ts"] and r["ts"] + r["dur"] <= end, r
    counters = collections.defaultdict(list)
    for e in by[("C", None)]:
        counters[e["name"]].append(next(iter(e["args"].values())))
    assert counters, by.keys()
    allocated = [v for name, values in counters.items() if "alloc" in name for v in values]
    budgets = [v for name, values in counters.items() if "budget" in name for v in values]
    assert allocated and max(allocated) <= budget_bytes
    assert budgets == [budget_bytes] * len(budgets) and budgets
    return by


def test_timeline_of_a_live_run(lib, tmp_path):
    path = tmp_path / "run.json"
    b = budget(lib)
    proc = run(driver(*ARGS), clean_env(LD_PRELOAD=lib, DTR_CONF=f"budget:{b},timeline:{path}"))
    assert "dtr: wrote timeline" in proc.stderr
    result = Result(proc)
    doc = json.loads(path.read_text())
    by = check_chrome_trace(doc, b)
    stats = result.stats
    assert len(by[("X", 2)]) == stats["dtr.num_remats"]
    assert len(by[("i", 3)]) == stats["dtr.num_evictions"]
    # Each eviction names the op that made the storage: one of the op spans.
    op_ids = {e["args"]["op"] for e in by[("X", 1)] if "op" in e.get("args", {})}
    assert by[("i", 3)] and all(e["args"]["op"] in op_ids for e in by[("i", 3)])
    assert doc["otherData"]["host"] == "torch"
    assert {e["name"] for e in by[("X", 1)]} >= {"aten::addmm"}


def test_dtr_run_draws_the_memory_picture(lib, dtr_run, tmp_path):
    svg = tmp_path / "memory.svg"
    b = budget(lib)
    proc = run([dtr_run, "--budget", str(b), "--svg", str(svg), "--", PYTHON,
                str(SCRIPTS / ARGS[0]), *ARGS[1:]], clean_env())
    assert "dtr-run: wrote" in proc.stderr, proc.stderr
    root = ET.parse(svg).getroot()  # well-formed XML
    assert root.tag == SVG + "svg"
    labels = {g.get("data-label") for g in root.iter(SVG + "g") if g.get("class") == "series"}
    assert {"baseline", "under budget", "evictions", "remats"} <= labels, labels
    lines = [l for l in root.iter(SVG + "line") if l.get("class") == "hline"]
    assert len(lines) == 1 and abs(float(lines[0].get("data-value")) - b / 2**20) < 0.01


CATEGORIES = {"activation", "parameter", "evicted", "remat", "unknown"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom",
           "snapshot"}


def load_snapshot(path):
    raw = path.read_bytes()
    assert raw[:2] == b"\x80\x04", "pickle protocol 4 (PyTorch's web viewer rejects 5)"
    return pickle.loads(raw)


def test_snapshot_of_a_live_run_reads_in_pytorch(lib, tmp_path):
    """DTR_SNAPSHOT in both formats: the dict has every key and category a viewer needs, the
    list passes PyTorch 1.13's own `_memory_viz stats` and segments()."""
    b = budget(lib)
    runs = {}
    for fmt in ("dict", "list"):
        path = tmp_path / f"{fmt}.pickle"
        proc = run(driver(*ARGS), clean_env(
            LD_PRELOAD=lib, DTR_CONF=f"budget:{b},snapshot:{path},snapshot_format:{fmt}"))
        assert "dtr: wrote snapshot" in proc.stderr, proc.stderr
        runs[fmt] = (path, Result(proc))
    d = load_snapshot(runs["dict"][0])
    assert {"segments", "device_traces", "user_metadata"} <= set(d)
    for seg in d["segments"]:
        assert sum(bl["size"] for bl in seg["blocks"]) == seg["total_size"]
        assert {bl["state"] for bl in seg["blocks"]} <= {"active_allocated", "inactive"}
    trace = d["device_traces"][0]
    assert trace and {e["action"] for e in trace} <= ACTIONS
    for e in trace:
        assert {"action", "addr", "size", "stream", "time_us", "frames"} <= set(e) or \
            e["action"] == "oom", e
    seen = {e.get("category") for e in trace}
    assert seen <= CATEGORIES
    assert {"activation", "parameter", "evicted", "remat"} <= seen, seen
    stats = runs["dict"][1].stats
    evicted_frees = [e for e in trace if e["action"] == "free_requested"
                     and e.get("category") == "evicted"]
    assert 0 < len(evicted_frees) <= stats["dtr.num_evictions"]
    assert d["user_metadata"]["budget_bytes"] == b
    # PyTorch 1.13's reader, on the list format: the CLI, and segments() in-process (the
    # CLI's segments would download flamegraph.pl, which this machine cannot reach).
    path = runs["list"][0]
    proc = subprocess.run([PYTHON, "-m", "torch.cuda._memory_viz", "stats", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "total_size" in proc.stdout
    from torch.cuda import _memory_viz
    folded = _memory_viz.segments(load_snapshot(path), format_flamegraph=lambda lines: lines)
    assert "active_allocated" in folded


def test_dump_snapshot_from_python(lib, tmp_path):
    """dtr.dump_snapshot(path) mid-run; a bad format is a DtrError naming the valid ones."""
    path = tmp_path / "mid.pickle"
    code = f"""
import torch, dtr
x = torch.randn(256, 1024)
y = (x * 2).sum()
dtr.dump_snapshot({str(path)!r}, format="list")
try:
    dtr.dump_snapshot({str(path)!r} + ".bad", format="json")
except dtr.DtrError as e:
    print("error:", e)
"""
    proc = run([PYTHON, "-c", code], clean_env(LD_PRELOAD=lib))
    data = load_snapshot(path)
    assert isinstance(data, list) and data
    assert any(bl["state"] == "active_allocated" and bl["size"] >= 256 * 1024 * 4
               for seg in data for bl in seg["blocks"])
    assert "error:" in proc.stdout and "dict" in proc.stdout and "list" in proc.stdout
