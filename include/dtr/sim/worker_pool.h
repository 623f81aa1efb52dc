// worker_pool.h: independent replays on all cores. A sweep's cells and `auto`'s trial
// replays (trial_replay.h) each run item i of n on a pool of threads that take the next
// item as they finish one; results go into slots the caller indexes by i.
#pragma once

#include <cstddef>
#include <functional>

namespace dtr {

// Calls item(i) for every i in [0, n) on up to `threads` threads (0: one per core), the
// calling thread among them, and returns when all are done. An exception an item throws is
// rethrown here (the first one) once every thread has ended; the other items still run.
void run_on_workers(size_t n, unsigned threads, const std::function<void(size_t)>& item);

}  // namespace dtr
