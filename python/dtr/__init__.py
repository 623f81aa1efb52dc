"""dtr: the Python side of libdtr_torch.so (docs/pytorch.md).

Pure Python over the library's C API (integration/torch/runtime.h) with ctypes. The
library does the work as soon as it is loaded (LD_PRELOAD, build/bin/dtr-run, or
torch.ops.load_library(path)); this module only reads and adjusts it:

    dtr.is_enabled()        # True when libdtr_torch.so is PyTorch's CPU allocator
    dtr.memory_stats()      # {"allocated_bytes.all.peak": ..., "num_ooms": ..., ...}
    dtr.set_budget("300M")  # or bytes as an int; 0 / None / "unlimited" = no budget
    dtr.get_budget()        # bytes, or None when unlimited
    dtr.reset_peak_stats()
    dtr.memory_allocated(), dtr.max_memory_allocated(), dtr.memory_reserved(),
    dtr.max_memory_reserved()  # bytes, as torch.cuda's functions of those names
    dtr.empty_cache()       # gives cached free segments back to the system; bytes released
    print(dtr.memory_summary())  # a table, as torch.cuda.memory_summary()
    with dtr.disable(): ...  # no lineage recorded on this thread inside (dtr.enable())
    dtr.mark_step()         # a training iteration ended, where no torch.optim step says so
    dtr.dump_snapshot("mem.pickle")  # a memory snapshot PyTorch's memory tools read

The library is found, in order: already loaded in this process (/proc/self/maps), the
DTR_LIBRARY environment variable, build/lib/libdtr_torch.so of the source tree this file
lives in. Importing dtr never loads the library itself: call load() (or
torch.ops.load_library) for that, so that `import dtr` cannot change how a script
allocates by surprise.
"""

import ctypes
import json
import numbers
import os
import threading

__all__ = [
    "DtrError",
    "disable",
    "dump_snapshot",
    "empty_cache",
    "enable",
    "get_budget",
    "is_enabled",
    "is_loaded",
    "is_recording",
    "library_path",
    "load",
    "mark_step",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_peak_stats",
    "set_budget",
]

LIBRARY_NAME = "libdtr_torch.so"
# Set to this process's pid while load() starts the library, which then keeps a bad
# option's message for load() to raise, where it would end the process.
_LOAD_RAISES = "DTR_LOAD_RAISES"
_load_lock = threading.Lock()
_UNLIMITED = 2**64 - 1
_lib = None


class DtrError(RuntimeError):
    """A request libdtr_torch.so refused; the message says why."""


def _loaded_path(name=LIBRARY_NAME):
    """Path of the library called `name` (libdtr_torch.so by default) if this process has
    it mapped, else None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]) == name:
                    return fields[-1]
    except OSError:
        pass
    return None


def _find_library(name, env_var):
    """Where the library `name` is: loaded in this process, else the path in `env_var`,
    else build/lib of the source tree this file lives in."""
    loaded = _loaded_path(name)
    if loaded:
        return loaded
    env = os.environ.get(env_var)
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "build", "lib", name))


def library_path():
    """Where libdtr_torch.so is (loaded, DTR_LIBRARY, or the source tree's build/lib)."""
    return _find_library(LIBRARY_NAME, "DTR_LIBRARY")


def _bind(lib):
    lib.dtr_torch_is_enabled.restype = ctypes.c_int
    lib.dtr_torch_memory_stats_json.restype = ctypes.c_char_p
    lib.dtr_torch_set_budget.argtypes = [ctypes.c_char_p]
    lib.dtr_torch_set_budget.restype = ctypes.c_int
    lib.dtr_torch_budget_bytes.restype = ctypes.c_uint64
    lib.dtr_torch_reserved_limit_bytes.restype = ctypes.c_uint64
    lib.dtr_torch_reset_peak_stats.restype = None
    lib.dtr_torch_empty_cache.restype = ctypes.c_uint64
    lib.dtr_torch_start.argtypes = [ctypes.c_int]
    lib.dtr_torch_start.restype = ctypes.c_int
    lib.dtr_torch_last_error.restype = ctypes.c_char_p
    lib.dtr_torch_compiled_torch_version.restype = ctypes.c_char_p
    lib.dtr_torch_set_recording.argtypes = [ctypes.c_int]
    lib.dtr_torch_set_recording.restype = None
    lib.dtr_torch_recording.restype = ctypes.c_int
    lib.dtr_torch_mark_step.restype = ctypes.c_int
    lib.dtr_torch_dump_snapshot.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.dtr_torch_dump_snapshot.restype = ctypes.c_int
    return lib


def is_loaded():
    """True when this process has libdtr_torch.so loaded."""
    return _loaded_path() is not None


def load(path=None):
    """Loads libdtr_torch.so into this process (as torch.ops.load_library would), which
    installs its CPU allocator, and returns its path. A no-op when it is loaded and
    started already. Import torch first: the library needs libtorch.

    A bad option (DTR_CONF, DTR_*) raises DtrError with the reason and the valid keys,
    and the library stays off; fix os.environ and call load() again. (Loaded any other way,
    the library ends the process with status 2 instead: Note [Bad configuration] in
    integration/torch/runtime.cpp.)"""
    global _lib
    loaded = _loaded_path()
    target = loaded or path or library_path()
    if not os.path.exists(target):
        raise DtrError(
            f"{target} does not exist: build the dtr_torch target "
            "(cmake --build build --target dtr_torch) or set DTR_LIBRARY")
    with _load_lock:  # one load at a time: each sets and restores the variable
        previous = os.environ.get(_LOAD_RAISES)
        os.environ[_LOAD_RAISES] = str(os.getpid())
        try:
            lib = _bind(ctypes.CDLL(target))
            failed = lib.dtr_torch_start(1 if loaded else 0)
        finally:
            if previous is None:
                os.environ.pop(_LOAD_RAISES, None)
            else:
                os.environ[_LOAD_RAISES] = previous
        _lib = lib
    if failed:
        raise DtrError(lib.dtr_torch_last_error().decode())
    return target


def _library():
    global _lib
    if _lib is None:
        loaded = _loaded_path()
        if loaded is None:
            raise DtrError(
                f"{LIBRARY_NAME} is not loaded in this process: run the script under "
                f"build/bin/dtr-run or LD_PRELOAD={library_path()}, or call "
                "torch.ops.load_library(path) / dtr.load() first")
        _lib = _bind(ctypes.CDLL(loaded))
    return _lib


def is_enabled():
    """True when libdtr_torch.so is loaded and its allocator is PyTorch's CPU allocator."""
    if _lib is None and not is_loaded():
        return False
    return bool(_library().dtr_torch_is_enabled())


def _enabled_library():
    lib = _library()
    if not lib.dtr_torch_is_enabled():
        if lib.dtr_torch_start(0):  # dtr.load() raised: its options stopped it
            raise DtrError(lib.dtr_torch_last_error().decode())
        raise DtrError(f"{LIBRARY_NAME} is loaded but not enabled in this process")
    return lib


def memory_stats():
    """The allocator's counters, named as torch.cuda.memory_stats() names them
    (allocated_bytes.all.current / .peak / .allocated / .freed, reserved_bytes.*,
    allocation.*, segment.*, num_alloc_retries, num_ooms) plus dtr.* ones."""
    return json.loads(_enabled_library().dtr_torch_memory_stats_json().decode())


def set_budget(budget):
    """Sets the hard budget on live CPU tensor bytes: an int (bytes) or a string as the
    `budget` option takes it ("300M", "4G"), or a ratio of the peak so far
    (max_memory_allocated()) as "0.5x"; 0, None or "unlimited" remove it. A budget below
    what is allocated now evicts down to it first; raises DtrError when what stays
    allocated is still more (then the budget is as it was). The thrash check (option
    max_overhead, docs/pytorch.md "Thrashing") counts from here and may fire again, and
    policy `auto` tries its candidates again at the new budget (by replay of the step
    after this one: docs/pytorch.md "Trial after a budget change"). Best called between
    steps."""
    if budget is None:
        text = "unlimited"
    elif isinstance(budget, bool):
        raise TypeError("budget must be bytes (int) or a string such as '300M' or '0.5x'")
    elif isinstance(budget, numbers.Integral):  # numpy's and torch's integers too
        budget = int(budget)
        if budget < 0:
            raise ValueError(f"budget must be >= 0 bytes, not {budget}")
        text = str(budget)
    elif isinstance(budget, str):
        if "\0" in budget:  # C would read only up to it
            raise ValueError(f"budget {budget!r} holds a NUL character")
        text = budget
    else:
        raise TypeError("budget must be bytes (int) or a string such as '300M' or '0.5x'")
    lib = _library()
    if lib.dtr_torch_set_budget(text.encode()) != 0:
        raise DtrError(lib.dtr_torch_last_error().decode())


def get_budget():
    """The budget in bytes, or None when unlimited."""
    value = _library().dtr_torch_budget_bytes()
    return None if value == _UNLIMITED else value


def reset_peak_stats():
    """Peaks restart from the current values, as torch.cuda.reset_peak_memory_stats()."""
    _library().dtr_torch_reset_peak_stats()


def memory_allocated():
    """Bytes of live CPU tensors now (allocated_bytes.all.current), what the budget caps;
    as torch.cuda.memory_allocated()."""
    return memory_stats()["allocated_bytes.all.current"]


def max_memory_allocated():
    """Peak of memory_allocated() since the start or reset_peak_stats()."""
    return memory_stats()["allocated_bytes.all.peak"]


def memory_reserved():
    """Bytes the allocator holds from the system now, cached free blocks included
    (reserved_bytes.all.current); empty_cache() gives the free segments back."""
    return memory_stats()["reserved_bytes.all.current"]


def max_memory_reserved():
    """Peak of memory_reserved() since the start or reset_peak_stats()."""
    return memory_stats()["reserved_bytes.all.peak"]


def empty_cache():
    """Gives every cached segment with no live block back to the system, as
    torch.cuda.empty_cache(), and the pages mimalloc kept for this thread's freed small
    tensors; returns the segment bytes released. Live and evicted tensors stay as they are;
    the budget caps allocated bytes, not reserved ones, so this is how a script lowers its
    resident memory after a peak."""
    return int(_enabled_library().dtr_torch_empty_cache())


def _format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


def memory_summary():
    """A readable table of the allocator's and the runtime's counters, in the spirit of
    torch.cuda.memory_summary(): memory now and at peak, the budget and reserved limit, the
    pinned bytes, and what dtr did to keep under them (blocks moved, evictions, remats,
    their time)."""
    s = memory_stats()
    budget = get_budget()
    limit = _library().dtr_torch_reserved_limit_bytes()
    rows = [
        ("Allocated memory", _format_bytes(s["allocated_bytes.all.current"]),
         _format_bytes(s["allocated_bytes.all.peak"])),
        ("Reserved memory", _format_bytes(s["reserved_bytes.all.current"]),
         _format_bytes(s["reserved_bytes.all.peak"])),
        ("Allocations", str(s["allocation.all.current"]), str(s["allocation.all.peak"])),
        ("Segments", str(s["segment.all.current"]), str(s["segment.all.peak"])),
    ]
    totals = [
        ("Budget (allocated)", "unlimited" if budget is None else _format_bytes(budget)),
        ("Reserved limit", "unlimited" if limit == _UNLIMITED else _format_bytes(limit)),
        ("Pinned now (never evicted)", _format_bytes(s.get("dtr.pinned_bytes.current", 0))),
        # Note [Memory outside the allocator]: of those, memory the budget does not see
        ("  of which outside budget", _format_bytes(s.get("dtr.outside_bytes.current", 0))),
        ("Largest cached free block", _format_bytes(s.get("dtr.largest_free_block_bytes", 0))),
        # Note [Compaction]: blocks copied elsewhere so a segment could go back
        ("Blocks moved (compaction)", f'{s.get("dtr.num_block_moves", 0)}, '
                                      f'{_format_bytes(s.get("dtr.moved_bytes", 0))}'),
        ("Ops recorded", str(s.get("dtr.num_ops", 0))),
        ("Evictions", f'{s.get("dtr.num_evictions", 0)}, and '
                      f'{s.get("dtr.num_eager_evictions", 0)} freed as they died'),
        # Note [Room within remats]: of their time, what making room for them took
        ("Remats", f'{s.get("dtr.num_remats", 0)} taking '
                   f'{s.get("dtr.remat_measured_ns", 0) / 1e9:.3f} s '
                   f'({s.get("dtr.remat_room_ns", 0) / 1e9:.3f} s making room)'),
        ("Program ops' compute", f'{s.get("dtr.model_compute_ns", 0) / 1e9:.3f} s'),
        # Note [Host work in op times]: collects, searches and evictions, not in the above
        ("Making room", f'{s.get("dtr.make_room_ns", 0) / 1e9:.3f} s, '
                        f'{s.get("dtr.full_collects", 0)} full collects'),
        ("Out-of-memory errors", str(s["num_ooms"])),
        ("Thrash alerts", str(s.get("dtr.num_thrash_alerts", 0))),
    ]
    width = 75
    lines = ["=" * width, " dtr memory summary (CPU)".ljust(width), "-" * width,
             f' {"Metric":<28}|{"Current":>22} |{"Peak":>21} ', "-" * width]
    lines += [f" {name:<28}|{cur:>22} |{peak:>21} " for name, cur, peak in rows]
    lines.append("-" * width)
    lines += [f" {name:<28}|{value:>45} " for name, value in totals]
    lines.append("=" * width)
    return "\n".join(lines)


def dump_snapshot(path, format=None):
    """Writes a memory snapshot to `path`, a pickle PyTorch's memory tools read
    (docs/observability.md): format "dict" ({segments, device_traces}, as
    torch.cuda.memory._dump_snapshot writes since PyTorch 2.0; pytorch.org/memory_viz) or
    "list" (1.13's segment list: python3 -m torch.cuda._memory_viz stats FILE); None = the
    `snapshot_format` option. device_traces (the recent allocator events) is filled only
    when the run was started with DTR_SNAPSHOT set, as PyTorch fills it only after
    _record_memory_history()."""
    lib = _library()
    fmt = b"" if format is None else str(format).encode()
    if lib.dtr_torch_dump_snapshot(os.fsencode(path), fmt) != 0:
        raise DtrError(lib.dtr_torch_last_error().decode())


def disable():
    """Stops recording lineage on this thread: ops still run (evicted inputs are refilled
    first), but what they make is never evicted nor recomputed. The allocator and its
    budget stay on. Returns a context manager that re-enables on exit:

        with dtr.disable():
            evaluate(model)
    """
    lib = _library()
    previous = bool(lib.dtr_torch_recording())  # nested: the outer block stays off
    lib.dtr_torch_set_recording(0)
    return _Recording(previous=previous)


def enable():
    """Records lineage on this thread again (the default)."""
    _library().dtr_torch_set_recording(1)


def mark_step():
    """Says a training iteration ended here. The library finds iterations by torch.optim's
    optimizer steps; a loop that updates its parameters by hand, or with an optimizer that
    is not a torch.optim.Optimizer, has none, and policy `auto` then stays on dtr_eq (and a
    DTR_TRACE has no STEP marks for dtr-sim). Call this once an iteration, after its update.
    From the first call on, only these calls end iterations. Raises DtrError when the
    library is not enabled."""
    lib = _library()
    if lib.dtr_torch_mark_step() != 0:
        raise DtrError(lib.dtr_torch_last_error().decode())


def is_recording():
    """Whether this thread records lineage (False inside dtr.disable())."""
    return bool(_library().dtr_torch_recording())


class _Recording:
    def __init__(self, previous):
        self._previous = previous

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _library().dtr_torch_set_recording(1 if self._previous else 0)
        return False
