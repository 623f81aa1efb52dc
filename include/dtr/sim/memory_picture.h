// memory_picture.h: allocated memory over a run as an SVG, no viewer needed.
//
// One panel drawn with svg_plot.h from Timelines (core/timeline.h): a baseline run (no
// budget) and a run under a budget, each as recorded by the simulator (dtr-sim run --svg)
// or read back from the torch library's timeline files (load_chrome_trace).
//
// Axes. x: time in ms since each timeline's origin (its first record); y: allocated MiB
// (2^20 bytes). Time, not op index, is the x axis because the two runs differ in length
// exactly by what DTR costs: the run under a budget re-runs ops (remats), so its line ends
// later than the baseline's, and the gap between the two ends is the overhead. By op index
// the runs would have the same length and the remats would be invisible. In the simulator
// time is logical (recorded op times, no wall clock); in a real run, steady_clock time.
//
// What is drawn (labels are part of the interface; tests and tools may rely on them):
//   series "baseline"          the baseline's allocated bytes, a step line (omitted when
//                              no baseline is given)
//   series `run_label`         the budgeted run's allocated bytes, a step line (default
//                              label "under budget"; dtr-sim uses "POLICY @ RATIO",
//                              e.g. "dtr_eq @ 0.5")
//   series "evictions"         crosses (marks) where the policy evicted, on the run's line
//   series "remats"            crosses where a remat started, on the run's line
//   <line class="hline" data-value="MiB">  the budget, dashed (when the run has one)
// "evictions" and "remats" are present (possibly empty) whenever the run is. Long runs are
// thinned for drawing, never changing a line's extremes: Note [Drawing a long run].
//
// Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtr/core/timeline.h"
#include "dtr/sim/svg_plot.h"

namespace dtr {

struct MemoryPictureOptions {
  std::string title = "allocated memory";
  std::string run_label = "under budget";
  std::optional<uint64_t> budget_bytes;  // the budget line; unset: the run's last budget
  size_t max_points = 2000;              // per line and per mark series (>= 8)
  int width = 900;                       // px
  int height = 420;                      // px
};

// The panel (for callers that lay out several). `baseline` may be null.
PlotPanel memory_panel(const Timeline* baseline, const Timeline& run,
                       const MemoryPictureOptions& options = {});

// The picture as a standalone SVG document (svg_plot.h's guarantees hold).
std::string render_memory_picture(const Timeline* baseline, const Timeline& run,
                                  const MemoryPictureOptions& options = {});

// render_memory_picture() written to `path`; throws std::runtime_error naming `path`.
void write_memory_picture(const std::string& path, const Timeline* baseline, const Timeline& run,
                          const MemoryPictureOptions& options = {});

}  // namespace dtr
