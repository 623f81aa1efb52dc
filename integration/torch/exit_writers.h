// exit_writers.h: what the library writes when the process ends (the report line, the
// snapshot, the trace and the timeline), run once, from Python's own exit where there is
// one and from C's atexit otherwise (Note [Outputs at exit] in exit_writers.cpp). No torch
// header.
#pragma once

namespace dtr::torch_integration {

// Runs `writer` once when the process ends; writers run in the reverse order of their
// registration, as atexit's do. At most 8.
void write_at_exit(void (*writer)());

// Called where Python is known to be up (the first op after it is): from then on the
// writers run at the end of Python's finalization too, whichever comes first. A no-op
// outside Python, and after the first call.
void hook_python_exit();

}  // namespace dtr::torch_integration
