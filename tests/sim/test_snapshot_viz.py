"""test_snapshot_viz.py: dtr-sim's memory snapshots load in Python and pass PyTorch's readers.

Run by ctest (tests/CMakeLists.txt, `snapshot_viz`):
    python3 test_snapshot_viz.py DTR_SIM DTR_DATA_DIR
Replays DTR's ResNet-32 log at half its baseline peak (evictions and remats happen) with
`dtr-sim run --snapshot`, in both formats, and checks:
  - the files are pickles of protocol <= 4 (PyTorch's web viewer rejects 5), and Python
    re-pickles what it loaded to the same bytes (core/pickle.cpp writes as Python does);
  - the dict has the keys torch.cuda.memory._dump_snapshot writes, blocks tile segments,
    trace actions and categories are from the allowed sets, `evicted` and `remat` occur,
    and replaying device_traces gives exactly the live blocks of the segments;
  - PyTorch 1.13's reader: `python3 -m torch.cuda._memory_viz stats FILE` exits 0 on the
    list format, and its segments() (called in-process: the CLI would download
    flamegraph.pl) folds every block; the dict's `segments` reads the same.
Exit 77 (ctest: skipped) when the log or torch is missing, saying which.
"""
import collections
import glob
import json
import os
import pickle
import pickletools
import re
import subprocess
import sys
import tempfile

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom",
           "snapshot"}
CATEGORIES = {"activation", "parameter", "evicted", "remat", "unknown"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames", "category"}
ENTRY_KEYS = {"action", "size", "stream", "time_us", "frames", "category"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what)


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def run_sim(sim, log, out, *extra, env=None):
    cmd = [sim, "run", "--trace", log, "--budget", "0.5", "--json", "--snapshot", out, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")
    return json.loads(p.stdout)


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    check(raw[:2] == b"\x80\x04", f"{path}: starts with PROTO 4")
    top = max(op.proto for op, _, _ in pickletools.genops(raw))
    check(top <= 4, f"{path}: opcodes of protocol {top} > 4")
    data = pickle.loads(raw)
    check(pickle.dumps(data, protocol=4) == raw, f"{path}: Python re-pickles to the same bytes")
    return data


def check_tiling(segments, name):
    for seg in segments:
        total = sum(b["size"] for b in seg["blocks"])
        check(total == seg["total_size"], f"{name}: blocks tile segment {seg['address']}")


def check_dict(d, result):
    check(set(d) >= {"segments", "device_traces", "allocator_settings", "user_metadata"},
          "dict: top-level keys")
    for seg in d["segments"]:
        check(SEGMENT_KEYS <= set(seg), f"dict: segment keys {sorted(seg)}")
        check(seg["segment_type"] in ("small", "large"), "dict: segment_type")
        address = seg["address"]
        for b in seg["blocks"]:
            check(BLOCK_KEYS <= set(b), f"dict: block keys {sorted(b)}")
            check(b["address"] == address, "dict: block addresses follow each other")
            check(b["state"] in ("active_allocated", "inactive"), "dict: block state")
            check(b["category"] in CATEGORIES, f"dict: block category {b['category']}")
            address += b["size"]
    check_tiling(d["segments"], "dict")
    check(len(d["device_traces"]) == 1, "dict: one device")
    trace = d["device_traces"][0]
    seen = collections.Counter()
    last_time = 0
    live = set()
    for e in trace:
        check(ENTRY_KEYS <= set(e), f"dict: trace entry keys {sorted(e)}")
        check(("device_free" if e["action"] == "oom" else "addr") in e, "dict: addr/device_free")
        check(e["action"] in ACTIONS, f"dict: action {e['action']}")
        check(e["category"] in CATEGORIES, f"dict: category {e['category']}")
        check(e["time_us"] >= last_time, "dict: time_us never decreases")
        last_time = e["time_us"]
        seen[(e["action"], e["category"])] += 1
        if e["action"] == "alloc":
            live.add(e["addr"])
        elif e["action"] == "free_completed":
            live.discard(e["addr"])
    check(trace[-1]["action"] == "snapshot", "dict: the trace ends with a snapshot entry")
    cats = {c for _, c in seen}
    for c in ("evicted", "remat", "activation", "parameter", "unknown"):
        check(c in cats, f"dict: category {c} occurs in device_traces")
    check(seen[("free_completed", "evicted")] == result["evictions"],
          f"dict: one evicted free per eviction ({seen[('free_completed', 'evicted')]} vs "
          f"{result['evictions']})")
    check(seen[("alloc", "remat")] >= 1, "dict: remat allocations")
    meta = d["user_metadata"]
    for key in ("trace", "policy", "budget_bytes", "baseline_peak_bytes", "evictions", "remats",
                "status"):
        check(key in meta, f"dict: user_metadata.{key}")
    check(meta["evictions"] == result["evictions"] and meta["status"] == result["status"],
          "dict: user_metadata agrees with --json")
    # The whole history is kept (entries < 100000): replaying it gives the live blocks.
    check(meta["trace_entries_kept"] == meta["trace_entries_recorded"], "dict: nothing dropped")
    allocated = {b["address"] for s in d["segments"] for b in s["blocks"]
                 if b["state"] == "active_allocated"}
    check(live == allocated, f"dict: device_traces replay to the segments' live blocks "
          f"({len(live)} vs {len(allocated)})")


def check_torch_113(list_path, lst, d):
    try:
        import torch.cuda._memory_viz as viz
    except Exception as e:  # noqa: BLE001 - any import failure means: no torch here
        skip(f"torch.cuda._memory_viz cannot be imported ({e}); pickle checks passed")
    p = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", list_path],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"_memory_viz stats exits 0 (stderr: {p.stderr[-500:]})")
    check("total_size" in p.stdout and "segments" in p.stdout, "_memory_viz stats prints")
    stats = viz.stats(lst)
    check(stats["segments"] == len(lst), "stats: segment count")
    check(stats["total_size"].value == sum(s["total_size"] for s in lst), "stats: total_size")
    folded = viz.segments(lst, format_flamegraph=lambda s: s)
    lines = folded.strip().split("\n")
    pattern = re.compile(r"^stream_0;seg_(\d+);(active_allocated|inactive) (\d+)$")
    check(all(pattern.match(line) for line in lines), "segments: folded lines")
    check(len(lines) == sum(len(s["blocks"]) for s in lst), "segments: one line per block")
    check(sum(int(line.rsplit(" ", 1)[1]) for line in lines) ==
          sum(s["total_size"] for s in lst), "segments: sizes add up")
    viz.memory(lst, format_flamegraph=lambda s: s)
    # The dict's segments are a 1.13 segment list as well.
    check(str(viz.stats(d["segments"])) == str(stats), "stats of dict['segments'] == of list")
    check(viz.segments(d["segments"], format_flamegraph=lambda s: s) == folded,
          "segments of dict['segments'] == of list")


def main():
    sim = sys.argv[1]
    data_dir = sys.argv[2] if len(sys.argv) > 2 else ""
    if not data_dir:
        skip("no DTR_DATA_DIR (configure with -DDTR_DATA_DIR=.../dtr-logs)")
    logs = glob.glob(os.path.join(data_dir, "resnet32-*.log"))
    if not logs:
        skip(f"no resnet32 log in {data_dir}")
    log = logs[0]
    with tempfile.TemporaryDirectory() as tmp:
        dict_path = os.path.join(tmp, "snap.pickle")
        list_path = os.path.join(tmp, "snap_list.pickle")
        result = run_sim(sim, log, dict_path)
        check(result["evictions"] > 0 and result["remats"] > 0, "the budget forces evictions")
        run_sim(sim, log, list_path, "--snapshot-format", "list")
        d = load(dict_path)
        lst = load(list_path)
        check(isinstance(d, dict) and isinstance(lst, list), "formats: dict and list")
        check_dict(d, result)
        check_tiling(lst, "list")
        check(lst == [{k: v for k, v in s.items() if k not in ("device", "is_expandable",
                                                                 "frames")}
                      | {"blocks": [{k: v for k, v in b.items() if k not in ("address", "frames")}
                                    for b in s["blocks"]]}
                      for s in d["segments"]], "list: the dict's segments, 1.13 keys")
        # A ring of 50: the last 50 events and the closing snapshot entry.
        small_path = os.path.join(tmp, "snap_small.pickle")
        env = dict(os.environ, DTR_SNAPSHOT_ENTRIES="50")
        run_sim(sim, log, small_path, env=env)
        small = load(small_path)
        check(len(small["device_traces"][0]) == 51, "ring: 50 entries + snapshot")
        check(small["device_traces"][0][:-1] == d["device_traces"][0][-51:-1],
              "ring: the last 50 events")
        # An out-of-memory run still writes its snapshot, with the oom entry. 0.03: well
        # below where Note [Relaxed remat locks] turns some out-of-memory cells into thrash.
        oom_path = os.path.join(tmp, "snap_oom.pickle")
        p = subprocess.run([sim, "run", "--trace", log, "--budget", "0.03", "--snapshot",
                            oom_path], capture_output=True, text=True)
        check(p.returncode == 0, "oom run exits 0")
        oom = load(oom_path)
        check(oom["user_metadata"]["status"] == "oom", "oom: status")
        check(any(e["action"] == "oom" for e in oom["device_traces"][0]), "oom: an oom entry")
        check_torch_113(list_path, lst, d)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all snapshot checks passed")


if __name__ == "__main__":
    main()
