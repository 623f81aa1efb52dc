// memory_picture.cpp: Timelines -> one svg_plot panel (include/dtr/sim/memory_picture.h).
//
// Note [Drawing a long run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A replay of a real log records tens of thousands of allocated samples, more than an
// SVG should carry (and more than a panel has pixels). A line is thinned as M4 does for
// time series: the time axis is cut into max_points / 4 equal buckets and each bucket keeps
// its first, lowest, highest and last vertex, in order. Every peak and trough stays (the
// highest vertex of each bucket), and so does every budget crossing one could see, so the
// thinned line looks the same as the full one at the panel's resolution. Marks keep the
// first mark of each of max_points buckets: a burst of evictions reads as one cross per
// bucket, which is what one could tell apart anyway. Below the limits nothing is thinned.
#include "dtr/sim/memory_picture.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtr/core/output_file.h"

namespace dtr {

namespace {

constexpr double kBytesPerMiB = 1024.0 * 1024.0;
constexpr double kNsPerMs = 1e6;

double mib(uint64_t bytes) { return double(bytes) / kBytesPerMiB; }

// Milliseconds since `origin`, which is at or before every time of the timeline.
double ms(uint64_t ts_ns, uint64_t origin_ns) {
  return ts_ns >= origin_ns ? double(ts_ns - origin_ns) / kNsPerMs : 0.0;
}

std::vector<TimelineSample> sorted_samples(const Timeline& t) {
  std::vector<TimelineSample> s = t.allocated_samples();
  std::stable_sort(s.begin(), s.end(), [](const TimelineSample& a, const TimelineSample& b) {
    return a.ts_ns < b.ts_ns;
  });
  return s;
}

// The step function's value at `ts`: the last sample at or before it (0 before the first).
uint64_t value_at(const std::vector<TimelineSample>& s, uint64_t ts) {
  auto it = std::upper_bound(s.begin(), s.end(), ts,
                             [](uint64_t t, const TimelineSample& x) { return t < x.ts_ns; });
  return it == s.begin() ? 0 : std::prev(it)->bytes;
}

size_t bucket_of(double x, double x0, double width, size_t buckets) {
  if (!(width > 0)) return 0;
  const double b = std::floor((x - x0) / width);
  return b <= 0 ? 0 : std::min(buckets - 1, static_cast<size_t>(b));
}

// Note [Drawing a long run]: first, lowest, highest, last vertex per bucket.
std::vector<PlotPoint> thin_line(const std::vector<PlotPoint>& v, size_t max_points) {
  if (v.size() <= max_points) return v;
  const size_t buckets = std::max<size_t>(1, max_points / 4);
  const double x0 = v.front().x, width = (v.back().x - x0) / double(buckets);
  std::vector<PlotPoint> out;
  size_t i = 0;
  while (i < v.size()) {
    const size_t b = bucket_of(v[i].x, x0, width, buckets);
    size_t lo = i, hi = i, last = i, j = i;
    for (; j < v.size() && bucket_of(v[j].x, x0, width, buckets) == b; ++j) {
      if (v[j].y < v[lo].y) lo = j;
      if (v[j].y > v[hi].y) hi = j;
      last = j;
    }
    size_t keep[4] = {i, lo, hi, last};
    std::sort(keep, keep + 4);
    for (size_t k = 0; k < 4; ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(v[keep[k]]);
    i = j;
  }
  return out;
}

std::vector<PlotPoint> thin_marks(std::vector<PlotPoint> marks, size_t max_points) {
  if (marks.size() <= max_points) return marks;
  std::stable_sort(marks.begin(), marks.end(),
                   [](const PlotPoint& a, const PlotPoint& b) { return a.x < b.x; });
  const double x0 = marks.front().x, width = (marks.back().x - x0) / double(max_points);
  std::vector<PlotPoint> out;
  size_t previous = SIZE_MAX;
  for (const PlotPoint& m : marks) {
    const size_t b = bucket_of(m.x, x0, width, max_points);
    if (b != previous) out.push_back(m);
    previous = b;
  }
  return out;
}

// The allocated bytes of `t` as a step line from its origin to its end.
PlotSeries step_series(const std::string& label, const Timeline& t, size_t max_points) {
  const std::vector<TimelineSample> s = sorted_samples(t);
  const uint64_t origin = t.origin_ns(), end = t.end_ns();
  std::vector<PlotPoint> v;
  v.reserve(2 * s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) v.push_back({ms(s[i].ts_ns, origin), mib(s[i - 1].bytes)});
    v.push_back({ms(s[i].ts_ns, origin), mib(s[i].bytes)});
  }
  if (!s.empty() && end > s.back().ts_ns) v.push_back({ms(end, origin), mib(s.back().bytes)});
  PlotSeries series{label, thin_line(v, max_points)};
  series.dots = false;
  return series;
}

}  // namespace

PlotPanel memory_panel(const Timeline* baseline, const Timeline& run,
                       const MemoryPictureOptions& options) {
  const size_t max_points = std::max<size_t>(8, options.max_points);
  PlotPanel panel;
  panel.title = options.title;
  panel.x_label = "time (ms)";
  panel.y_label = "allocated (MiB)";
  panel.y_min = 0.0;
  if (baseline) panel.series.push_back(step_series("baseline", *baseline, max_points));
  panel.series.push_back(step_series(options.run_label, run, max_points));

  const std::vector<TimelineSample> samples = sorted_samples(run);
  const uint64_t origin = run.origin_ns();
  PlotSeries evictions{"evictions", {}};
  for (const TimelineEviction& e : run.evictions())
    evictions.marks.push_back({ms(e.ts_ns, origin), mib(value_at(samples, e.ts_ns))});
  PlotSeries remats{"remats", {}};
  for (const TimelineSpan& s : run.spans())
    if (s.remat)
      remats.marks.push_back({ms(s.start_ns, origin), mib(value_at(samples, s.start_ns))});
  evictions.marks = thin_marks(std::move(evictions.marks), max_points);
  remats.marks = thin_marks(std::move(remats.marks), max_points);
  evictions.dots = remats.dots = false;
  panel.series.push_back(std::move(evictions));
  panel.series.push_back(std::move(remats));

  const std::optional<uint64_t> budget =
      options.budget_bytes ? options.budget_bytes : run.last_budget();
  if (budget) panel.hlines.push_back(mib(*budget));
  return panel;
}

std::string render_memory_picture(const Timeline* baseline, const Timeline& run,
                                  const MemoryPictureOptions& options) {
  PlotOptions plot;
  plot.panel_width = options.width;
  plot.panel_height = options.height;
  plot.columns = 1;
  return render_svg({memory_panel(baseline, run, options)}, plot);
}

void write_memory_picture(const std::string& path, const Timeline* baseline, const Timeline& run,
                          const MemoryPictureOptions& options) {
  // Note [Output files]
  write_file(path, render_memory_picture(baseline, run, options), "memory picture");
}

}  // namespace dtr
