// progress_bar.h: a one-line terminal progress bar for long simulator sweeps.
//
//   label [#########.....................] 37/189  20%  ETA 3s
//
// The bar redraws its line in place with '\r', at most about ten times a second, and
// ends it with a newline in finish(). It draws only when `out` is a terminal and TERM
// is not "dumb" (so logs and CI output stay clean), unless made with forced().
//
// Thread safety: tick() and finish() may be called from any thread; one mutex guards
// the count and the output stream. The ETA is elapsed steady_clock time scaled by the
// fraction still to do.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>

namespace dtr {

class ProgressBar {
 public:
  ProgressBar(size_t total, std::string label, std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // A bar that draws whatever `out` is (for tests and for callers that decided).
  static ProgressBar forced(size_t total, std::string label, std::FILE* out);

  // Counts `n` more steps done; redraws if the last draw is old enough or the count
  // reaches `total`.
  void tick(size_t n = 1);
  // Draws the final line and a newline (if enabled). Idempotent; ticks after it count
  // but draw nothing.
  void finish();
  bool enabled() const { return enabled_; }
  size_t done() const;

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  ProgressBar(size_t total, std::string label, std::FILE* out, bool enabled);
  void draw_locked(SteadyTime now, bool final_line);

  const size_t total_;
  const std::string label_;
  std::FILE* const out_;
  const bool enabled_;
  const SteadyTime start_;

  mutable std::mutex mutex_;  // guards everything below and writes to out_
  size_t done_ = 0;
  SteadyTime last_draw_;
  bool drawn_since_start_ = false;  // the first tick always draws
  size_t last_line_length_ = 0;     // to blank the rest of a longer previous line
  bool finished_ = false;
};

}  // namespace dtr
