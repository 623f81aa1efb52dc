// exit_writers.h: what the library writes when the process ends (the report line, the
// snapshot, the trace and the timeline), run once, from Python's own exit where there is
// one and from C's atexit otherwise (Note [Outputs at exit] in exit_writers.cpp). No torch
// header.
#pragma once

namespace dtr::torch_integration {

// Runs `writer` once when the process ends; writers run in the reverse order of their
// registration, as atexit's do. At most 8.
void write_at_exit(void (*writer)());

// Called with the GIL held where Python is known to be up (the raw-access guard's
// installer): from then on the writers run at the end of Python's finalization too,
// whichever comes first, and at a SIGTERM (Note [Outputs at SIGTERM]). Does nothing
// before Python is up, outside Python, where Python is embedded in another program, and
// after the first call that found it up.
void hook_python_exit();

}  // namespace dtr::torch_integration
