"""A launcher, as a job script or torchrun is: starts `python3 args...` as a new process
(exec'd, not forked), its output going straight to ours, and exits with its status.
Knows nothing of dtr.

    python3 launcher.py [--maps] script.py args...

--maps  first runs two children that print their memory maps, `cat /proc/self/maps`
        and a Python that imports nothing, and prints for each
        `LAUNCHER maps <child> <libraries it mapped that name torch, c10 or dtr>`
"""
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "--maps":
        argv = argv[1:]
        children = {"cat": ["cat", "/proc/self/maps"],
                    "python": [sys.executable, "-c", "print(open('/proc/self/maps').read())"]}
        for child, cmd in children.items():
            maps = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            # The file name only: the addresses are hex and may hold "c10".
            files = {line.split()[-1].rsplit("/", 1)[-1] for line in maps.splitlines()
                     if len(line.split()) > 5}
            names = sorted(f for f in files if "torch" in f or "dtr" in f or "c10" in f)
            print(f"LAUNCHER maps {child} {' '.join(names) or '-'}", flush=True)
    sys.exit(subprocess.run([sys.executable, *argv]).returncode)


if __name__ == "__main__":
    main()
