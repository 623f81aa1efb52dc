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
// is the program, the hook above also installs a C handler for SIGTERM, only where the
// disposition is still the default (a program's own handler, SIG_IGN set by a parent, or
// another library's handler is left alone). The handler puts the default back (so a
// second SIGTERM ends the process at once, whatever the writers are waiting for) and wakes
// a watcher thread through a pipe, which is all a signal handler may do; the watcher runs
// the writers and sends the process SIGTERM again, so it still ends by the signal and its
// parent sees the same status. A first try (a Python handler) was wrong three ways, all
// seen by a probe: a main thread blocked in C (a future that never completes, gloo
// waiting for a peer) never ran it, so the process no longer died; a Python signal
// handler run inside it (DataLoader's SIGCHLD, its workers killed by the same group
// SIGTERM) raised out of it, and the program went on or exited 1; and
// signal.getsignal no longer said SIG_DFL, so a framework that keeps a handler it finds
// (Lightning) chained to it and died instead of saving its checkpoint. A C handler
// leaves Python's own record of SIGTERM at SIG_DFL, and a handler a program sets from
// Python, before the first op or after, replaces this one.
// While the watcher writes, the program runs on. One that then exits (an exception: the
// DataLoader's "worker killed by signal") waits in run_writers for the watcher, which
// sends SIGTERM holding the lock, so the status is still the signal's (with the
// program's traceback on stderr, which a run without dtr would not print). The wait is
// bounded (kRunWait, once for the process: the bound covers the run lock only, not the
// locks the writers take), as a thread could exit holding a lock a writer needs.
// The watcher blocks SIGTERM as it blocks the rest: the signal reaches only the program's
// own threads, whose masks mean what they mean without dtr. A program that blocks SIGTERM
// while it saves a checkpoint, or takes it with sigwait, had the watcher take it at once
// and the process die part way through the save (5 of 20 chunks written; the review's
// repro); now the signal waits for the program, and the watcher's own SIGTERM, sent once
// the outputs are written, stays pending as the first would have.
// Forked children (DataLoader workers, multiprocessing.Pool's) get the default back at
// the fork (the watcher thread does not survive it), and die by SIGTERM as before. A
// second SIGTERM during the writing ends the process at once, and the file being written
// is left beside its path as PATH.dtr-PID-N, never short under its own name (Note [Whole
// or absent] in core/output_file.cpp). os._exit and SIGKILL still write nothing. Python 3.12 and later warn at os.fork in a process with more than one
// thread, and the watcher is one.
#include "integration/torch/exit_writers.h"

#include "integration/torch/process_kind.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <type_traits>

namespace dtr::torch_integration {

namespace {

constexpr int kMaxWriters = 8;
std::mutex writers_mutex;
void (*writers[kMaxWriters])() = {};
int num_writers = 0;

// Held while the writers run, so a second caller (a main thread exiting while the SIGTERM
// watcher writes) waits for the first instead of ending the process under it (Note
// [Outputs at SIGTERM]); at most kRunWait, as the first may wait on a lock the second
// holds.
std::timed_mutex run_mutex;
bool ran = false;  // under run_mutex
// exit() runs static destructors while the watcher may still hold it (after a timed-out
// wait): it must have none to run.
static_assert(std::is_trivially_destructible_v<std::timed_mutex>);
constexpr std::chrono::seconds kRunWait{30};

void run_writers_locked() {
  if (ran) return;
  ran = true;
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

// Waits at most kRunWait for the lock, once for the process: an exit through Py_AtExit
// and then atexit does not wait twice.
std::unique_lock<std::timed_mutex> take_run_lock() {
  static std::atomic<bool> gave_up{false};
  std::unique_lock<std::timed_mutex> lock(run_mutex, std::defer_lock);
  if (gave_up.load() ? lock.try_lock() : lock.try_lock_for(kRunWait)) return lock;
  gave_up.store(true);
  return lock;
}

void run_writers() {
  std::unique_lock<std::timed_mutex> lock = take_run_lock();
  if (lock.owns_lock()) run_writers_locked();
}

// Note [Outputs at SIGTERM]
pid_t sigterm_owner = 0;  // the process whose watcher writes
int sigterm_pipe[2] = {-1, -1};

void set_sigterm(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
}

// Whether SIGTERM's disposition is `handler` (a plain one, not an SA_SIGINFO action).
bool sigterm_handler_is(void (*handler)(int)) {
  struct sigaction now {};
  return sigaction(SIGTERM, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
         now.sa_handler == handler;
}

// Only async-signal-safe calls here.
void on_sigterm(int) {
  const int saved_errno = errno;
  set_sigterm(SIG_DFL);
  const char byte = 1;
  // raise() is held until the handler returns (SIGTERM is blocked in it), then the
  // default action ends the process: in a child that kept the handler, or where no
  // watcher can be woken.
  if (getpid() != sigterm_owner || write(sigterm_pipe[1], &byte, 1) != 1) raise(SIGTERM);
  errno = saved_errno;
}

void* watch_for_sigterm(void*) {
  char byte;
  ssize_t n;
  do {
    n = read(sigterm_pipe[0], &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return nullptr;
  std::unique_lock<std::timed_mutex> lock = take_run_lock();
  if (lock.owns_lock()) run_writers_locked();
  // The default is back since the handler; sent holding the lock, so that a thread on
  // its way out does not end the process first with a status of its own.
  kill(getpid(), SIGTERM);
  return nullptr;
}

// The watcher thread is gone in a child, and the run lock may have been its at the fork.
void default_sigterm_in_child() {
  new (&run_mutex) std::timed_mutex();
  if (sigterm_handler_is(&on_sigterm)) set_sigterm(SIG_DFL);
}

void install_sigterm_writers() {
  if (!sigterm_handler_is(SIG_DFL)) return;
  if (pipe2(sigterm_pipe, O_CLOEXEC) != 0) return;
  // The watcher takes no asynchronous signal, SIGTERM included: the program's threads get
  // them, as without dtr (Note [Outputs at SIGTERM]).
  sigset_t blocked, previous;
  sigfillset(&blocked);
  for (int kept : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigdelset(&blocked, kept);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  pthread_t watcher;
  const int created = pthread_create(&watcher, nullptr, &watch_for_sigterm, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (created != 0) {
    close(sigterm_pipe[0]);
    close(sigterm_pipe[1]);
    return;
  }
  pthread_detach(watcher);
  sigterm_owner = getpid();
  pthread_atfork(nullptr, nullptr, &default_sigterm_in_child);
  set_sigterm(&on_sigterm);
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
  install_sigterm_writers();  // Note [Outputs at SIGTERM]
}

}  // namespace dtr::torch_integration
