"""Test driver: runs an unmodified script (runpy, as `python3 script.py args` would), then
prints what the tests check about the process, on lines starting with `DTR_TEST `:

    python3 run_script.py [--load-library PATH] [--make-tensor-first] -- script.py args...

--load-library   import torch, then torch.ops.load_library(PATH) before the script runs
--make-tensor-first  allocate a tensor before loading the library and free it after the
                 script: it must go back through its own deleter, not ours
After the script: `DTR_TEST enabled <0|1>`, `DTR_TEST stats <json>` when enabled, and
`DTR_TEST ld_preload <value or None>` as the script (and its children) see it.
"""
import json
import os
import runpy
import sys


def main():
    argv = sys.argv[1:]
    load_library = None
    tensor_first = False
    while argv and argv[0] != "--":
        if argv[0] == "--load-library":
            load_library = argv[1]
            argv = argv[2:]
        elif argv[0] == "--make-tensor-first":
            tensor_first = True
            argv = argv[1:]
        else:
            raise SystemExit(f"run_script.py: unknown flag {argv[0]}")
    argv = argv[1:]
    early = None
    if tensor_first or load_library:
        import torch
        if tensor_first:
            early = torch.randn(300000)
            early_sum = float(early.sum())
        if load_library:
            torch.ops.load_library(load_library)
    script = argv[0]
    sys.argv = argv
    runpy.run_path(script, run_name="__main__")
    if early is not None:
        assert float(early.sum()) == early_sum, "a tensor made before loading changed"
        del early
    import dtr
    print(f"DTR_TEST enabled {int(dtr.is_enabled())}", flush=True)
    if dtr.is_enabled():
        print(f"DTR_TEST stats {json.dumps(dtr.memory_stats())}", flush=True)
    print(f"DTR_TEST ld_preload {os.environ.get('LD_PRELOAD')}", flush=True)


if __name__ == "__main__":
    main()
