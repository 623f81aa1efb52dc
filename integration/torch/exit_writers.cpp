// exit_writers.cpp: the library's outputs at the end of the process (exit_writers.h).
//
// Note [Outputs at exit]
// ~~~~~~~~~~~~~~~~~~~~~~
// The report (DTR_REPORT), the snapshot (DTR_SNAPSHOT), the trace and the timeline are
// written when the process ends. Until 2026-12-07 each was a C atexit handler, and a run
// stopped by Ctrl-C wrote none of them and said nothing: Python ends an uncaught
// KeyboardInterrupt by finalizing the interpreter and then killing itself with SIGINT
// (so that its parent sees the signal, bpo-1054041), and exit() never runs. So the
// writers are registered here, once each, and run once, by the first of:
//  - Python's low-level exit functions (Py_AtExit), which Py_FinalizeEx calls last,
//    after the interpreter is torn down (so every tensor the program held is freed, as
//    under atexit before), on every way a Python program ends normally: the script's
//    end, sys.exit, an uncaught exception, and the KeyboardInterrupt above;
//  - C's atexit, for a process that is not Python (a libtorch program) or exits without
//    finalizing Python (os._exit skips both; a signal's default action too).
// Py_AtExit is looked up in the process (dlsym: the library does not link libpython) and
// called only once the interpreter is up: under LD_PRELOAD the library starts before
// Python does, whose start-up may reset what was registered before it. The first op run
// once Python is up registers it (hook_python_exit, from the raw-access guard, which
// waits for the same moment and holds the GIL there: Py_AtExit takes no lock before
// 3.13). Only where Python is the program (python_is_the_program): a C++ program that
// embeds Python may finalize it and train on, and writing everything at that first
// finalization would cut its trace and report short. A writer that throws is reported
// and the others still run.
//
// Note [Outputs at SIGTERM]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A job scheduler ends a run with SIGTERM (Slurm at its time limit, Kubernetes when a pod
// stops, timeout(1)), and SIGTERM's default action ends the process without exit or
// finalization: until 2026-12-07 such a run wrote none of the four outputs. Where Python
// is the program, the hook above also installs a Python handler for SIGTERM, only where
// the disposition is still the default (a program's own handler, SIG_IGN under nohup, or
// a C library's handler is left alone) and only from the main thread (which Python
// requires). It puts the default back first, so a second SIGTERM ends the process at once
// whatever the writers are waiting for; runs the writers; and sends itself SIGTERM again,
// so the process still ends by the signal and its parent sees the same status. A Python
// handler runs on the main thread between bytecodes, an ordinary context where the
// writers may allocate and take the engine's lock, which a C signal handler may not. The
// cost: a main thread inside a long op or C call ends when that returns, not at once.
// Forked children (DataLoader workers, multiprocessing.Pool's) get the default back at
// the fork: a child's copy of a lock may be held for good (Note [Fork] in
// dispatch_hook.cpp), and Pool.terminate must not wait on its writers. A program that sets
// its own handler later replaces this one; if it ends by sys.exit, Py_AtExit writes the
// outputs. os._exit and SIGKILL still write nothing.
#include "integration/torch/exit_writers.h"

#include "integration/torch/process_kind.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

namespace dtr::torch_integration {

namespace {

constexpr int kMaxWriters = 8;
std::mutex writers_mutex;
void (*writers[kMaxWriters])() = {};
int num_writers = 0;

void run_writers() {
  static std::atomic<bool> ran{false};
  if (ran.exchange(true)) return;
  int count;
  {
    std::lock_guard<std::mutex> lock(writers_mutex);
    count = num_writers;
  }
  for (int i = count - 1; i >= 0; --i) {
    try {  // an exception leaving an exit function ends the process in std::terminate
      writers[i]();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtr: an output at exit failed: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "dtr: an output at exit failed\n");
    }
  }
}

// Whether Python is the program, not a library a C++ program embeds: the executable is
// named python* (python3, python3.11), or it holds Py_AtExit itself. An embedding program
// may finalize Python and train on (a pybind11 scoped interpreter): its outputs are
// written at exit, as before, whole.
bool python_is_the_program(void* at_exit) {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = '\0';
  const char* base = std::strrchr(exe, '/');
  base = base ? base + 1 : exe;
  if (std::strncmp(base, "python", 6) == 0) return true;
  Dl_info where{};
  char resolved[PATH_MAX];
  return dladdr(at_exit, &where) != 0 && where.dli_fname && *where.dli_fname &&
         realpath(where.dli_fname, resolved) && std::strcmp(resolved, exe) == 0;
}

}  // namespace

void write_at_exit(void (*writer)()) {
  std::lock_guard<std::mutex> lock(writers_mutex);
  if (num_writers == 0) std::atexit(run_writers);
  if (num_writers == kMaxWriters) std::abort();  // a programming error: raise kMaxWriters
  writers[num_writers++] = writer;
}

void hook_python_exit() {
  static std::atomic<bool> hooked{false};
  if (hooked.load(std::memory_order_relaxed)) return;
  const PythonApi& python = python_api();
  if (!python.is_initialized || !python.at_exit || !python.is_initialized()) return;
  if (hooked.exchange(true)) return;
  if (!python_is_the_program(reinterpret_cast<void*>(python.at_exit))) return;
  // -1 when Python's 32 slots are full: the writers then run from atexit alone.
  python.at_exit(run_writers);
  // Note [Outputs at SIGTERM]
  if (!python.run_string) return;
  static constexpr char kHookSigterm[] = R"PY(
def _dtr_hook_sigterm(address):
    import ctypes, os, signal, sys, threading
    try:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        write_outputs = ctypes.CFUNCTYPE(None)(address)
        pid = os.getpid()
        def dtr_write_outputs_then_terminate(signum, frame):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if os.getpid() == pid:
                write_outputs()
            os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, dtr_write_outputs_then_terminate)
        def in_child():
            if signal.getsignal(signal.SIGTERM) is dtr_write_outputs_then_terminate:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.register_at_fork(after_in_child=in_child)
    except Exception as e:
        print("dtr: warning: no SIGTERM handler (outputs are not written if one ends the "
              "run):", repr(e), file=sys.stderr, flush=True)
_dtr_hook_sigterm(%llu)
del _dtr_hook_sigterm
)PY";
  char code[sizeof kHookSigterm + 24];
  std::snprintf(code, sizeof code, kHookSigterm,
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&run_writers)));
  python.run_string(code);
}

}  // namespace dtr::torch_integration
