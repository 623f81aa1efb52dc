// constant_placement.cpp: has_early_constants (core/trace.h).
//
// Note [Plans number constants at first read]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A warm-start plan names storages by creation order: node k of a trace's graph is the
// k-th storage the run makes (Note [Warm start] in eviction/plan_guide.cpp). The PyTorch
// host registers a constant when an op first reads it (or overwrites it: zero_ on a fresh
// buffer names it nowhere in the CALL), and a trace recorded with
// trace_constants:allocated declares such a constant where its memory was allocated
// instead (EARLY: Note [Constants where they were allocated] in
// integration/torch/recording.cpp), often many ops before. Its storages are then made in
// another order than the live run's, so a plan made from it would not match the run it
// is meant for, node for node. Moving the constants back cannot be done from the trace
// alone (an overwritten buffer's first mention is after the op that registered it), so
// graph_from_trace refuses such a trace and says to record the default,
// trace_constants:read. Replays without a plan read either.
#include "dtr/core/trace.h"

namespace dtr {

bool has_early_constants(const Trace& trace) {
  for (const TraceEvent& e : trace.events)
    if (e.kind == TraceEventKind::constant && e.early) return true;
  return false;
}

}  // namespace dtr
