// synthetic_trace.h: traces made in memory, for tests, benchmarks and theory checks.
#pragma once

#include <cstdint>

#include "dtr/core/trace.h"

namespace dtr {

// A linear network of n unit ops: forward x_i = f(x_{i-1}) for i = 1..n, then backward
// g_{i-1} = f'(g_i, x_{i-1}) for i = n..1, releasing x_{i-1} and g_i as autograd would.
// Every op costs `unit_ns` and every tensor takes `unit_bytes`.
Trace make_linear_chain_trace(uint32_t n, uint64_t unit_bytes = 1, uint64_t unit_ns = 1);

// A seeded random program of about `n_events` events using every instruction: calls with
// several inputs and outputs, views (aliases), constants, copies, copy_from, mutation and
// releases. Every name is used only while it holds a reference, as in a real program.
// Sizes are multiples of `unit_bytes`: constants 1..64 units, outputs 1..256 units.
Trace make_random_trace(uint64_t seed, uint32_t n_events, uint64_t unit_bytes = 1024);

// A seeded random training step of `forward_ops` ops, for checks against exact planners:
// a CONSTANT input, forward ops that read the previous op's first output and sometimes an
// earlier one, a third of them with one or two more outputs only the backward reads (as
// batch norm's saved statistics), then after ANNOTATE BACKWARD one backward op per forward
// op, in reverse, reading the running gradient and that op's inputs and other outputs. Every name
// but the input and the last gradient is released right after its last read. Sizes are
// 1..4 `unit_bytes`, times 1..5 `unit_ns`.
Trace make_random_training_trace(uint64_t seed, uint32_t forward_ops, uint64_t unit_bytes = 8,
                                 uint64_t unit_ns = 1000);

// Gives a seeded third of the trace's CALLs a WORKSPACE of 1..256 `unit_bytes` (Note [Op
// workspace] in eviction/engine.cpp): scratch held while the op runs.
void add_random_workspaces(Trace& trace, uint64_t seed, uint64_t unit_bytes);

}  // namespace dtr
