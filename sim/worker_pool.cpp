// worker_pool.cpp: the thread pool of worker_pool.h.
#include "dtr/sim/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dtr {

void run_on_workers(size_t n, unsigned threads, const std::function<void(size_t)>& item) {
  std::atomic<size_t> next{0};
  std::mutex failed_mutex;
  std::exception_ptr failed;  // the first exception an item threw
  const auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) try {
        item(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failed_mutex);
        if (!failed) failed = std::current_exception();
      }
  };
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::min<size_t>(threads, n));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace dtr
