// progress_bar.cpp: the terminal progress bar (see progress_bar.h).
//
// Lock rule: every member that changes after construction, and every write to out_,
// is under mutex_. Drawing happens with the lock held so lines from two threads never
// interleave; a draw is one fprintf and one fflush, cheap next to a redraw interval.
#include "dtr/sim/progress_bar.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace dtr {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);  // ~10 redraws a second
constexpr size_t kBarWidthChars = 30;

bool should_draw_to(std::FILE* out) {
  if (out == nullptr) return false;
  int fd = fileno(out);
  if (fd < 0 || !isatty(fd)) return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

// "45s", "3m05s", "2h07m".
std::string format_duration(double seconds) {
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%lds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(size_t total, std::string label, std::FILE* out)
    : ProgressBar(total, std::move(label), out, should_draw_to(out)) {}

ProgressBar::ProgressBar(size_t total, std::string label, std::FILE* out, bool enabled)
    : total_(total),
      label_(std::move(label)),
      out_(out),
      enabled_(enabled && out != nullptr),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (enabled_) {
    std::lock_guard<std::mutex> lock(mutex_);
    draw_locked(start_, /*final_line=*/false);
  }
}

ProgressBar::~ProgressBar() { finish(); }

ProgressBar ProgressBar::forced(size_t total, std::string label, std::FILE* out) {
  return ProgressBar(total, std::move(label), out, /*enabled=*/true);
}

void ProgressBar::tick(size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += n;
  if (!enabled_ || finished_) return;
  SteadyTime now = std::chrono::steady_clock::now();
  if (!drawn_since_start_ || now - last_draw_ >= kRedrawInterval || done_ >= total_) {
    drawn_since_start_ = true;
    draw_locked(now, /*final_line=*/false);
  }
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (enabled_) draw_locked(std::chrono::steady_clock::now(), /*final_line=*/true);
}

size_t ProgressBar::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void ProgressBar::draw_locked(SteadyTime now, bool final_line) {
  last_draw_ = now;
  double fraction = total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
  size_t filled = static_cast<size_t>(fraction * kBarWidthChars);
  double elapsed_s = std::chrono::duration<double>(now - start_).count();

  std::string line = label_.empty() ? "" : label_ + " ";
  line += '[';
  line.append(filled, '#');
  line.append(kBarWidthChars - filled, '.');
  line += "] " + std::to_string(done_) + "/" + std::to_string(total_) + "  ";
  char percent[16];
  // Rounded, but 100% only once every step is done.
  long rounded = std::lround(fraction * 100);
  if (done_ < total_) rounded = std::min(rounded, 99L);
  std::snprintf(percent, sizeof percent, "%3ld%%", rounded);
  line += percent;
  if (final_line) {
    line += "  took " + format_duration(elapsed_s);
  } else if (done_ == 0) {
    line += "  ETA --";
  } else {
    line += "  ETA " + format_duration(elapsed_s * (1 - fraction) / fraction);
  }

  // Note [Redraw in place]: '\r' returns to the line's start without clearing it, so a
  // shorter line is padded with spaces over the tail of the previous one. No ANSI
  // escapes: output captured to a file stays plain text.
  size_t length = line.size();
  if (length < last_line_length_) line.append(last_line_length_ - length, ' ');
  last_line_length_ = length;
  std::fprintf(out_, "\r%s%s", line.c_str(), final_line ? "\n" : "");
  std::fflush(out_);
}

}  // namespace dtr
