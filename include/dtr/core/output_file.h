// output_file.h: the files the tools write (CSV tables, plans, graphs), checked.
//
// Note [Output files]: a result the user asked to have written is either written whole or
// the tool says it was not, naming the path and the reason. Two ways it was lost before
// (2026-12-07, a probe of the tools with bad paths): a stream's failed writes were never
// looked at (`--csv /dev/full` reported success, the bytes gone at the stream's close), and
// a bad path was found only after the work (a sweep's replays, a solve) was done and then
// thrown away. So the tools check every output path before they start
// (check_writable), and write through write_file, which checks the close.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtr {

// What check_writable and write_file throw; the message starts "dtr: cannot write".
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws OutputError("dtr: cannot write WHAT 'PATH': REASON; ...") unless PATH can
// be written now: not a directory, and its directory exists and is writable (an existing
// file must be writable too). Creates nothing.
void check_writable(const std::string& path, std::string_view what);

// A file a tool reads or writes, and what it is ("trace", "CSV"); an empty path is none.
struct NamedPath {
  std::string path;
  std::string what;
};

// Note [Outputs that are inputs] in core/output_file.cpp: check_writable for each output,
// then throws OutputError where an output is the same file as an input (`--timeline in.log`
// replaced the trace it replayed) or as another output (`--csv F --svg F` kept only the
// plot). Files that are not regular (/dev/null) may be named any number of times.
void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Whether two paths name one file, as check_outputs compares them: one inode where both
// exist, the same absolute path made lexically normal where neither does (Note [Outputs
// that are inputs]). For inputs, such as a sweep's traces, that must each be given once.
bool same_file(const std::string& a, const std::string& b);

// One field of a CSV row as RFC 4180 writes it: as it is, or in double quotes (quotes
// doubled) where it holds a comma, a quote or a line break (a trace named `a,b"c.trace`
// gave a row of 22 fields under a header of 21).
std::string csv_field(std::string_view text);

// A tool's exit status once its standard output is flushed: `status`, or 2 with a message
// on stderr naming `tool` where the output could not be written (a full disk under
// `dtr-plan graph > g.txt` exited 0 with the graph cut short).
int finish_standard_output(const char* tool, int status);

// Writes `text` to PATH, replacing what was there, whole or not at all (ReplacingFile);
// throws as check_writable does when the open, a write or the close fails (a full disk
// among them).
void write_file(const std::string& path, std::string_view text, std::string_view what);

// Note [Whole or absent] in core/output_file.cpp: an output written beside its path
// (PATH.dtr-PID-N) and renamed onto it once closed, so a run killed while it writes
// (SIGKILL after a SIGTERM's grace, a second SIGTERM) leaves the old file or none, never a
// short one under its name. Devices, pipes, paths under /dev and /proc, links to nothing
// and paths a rename cannot replace are written in place.
class ReplacingFile {
 public:
  explicit ReplacingFile(const std::string& path);
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;
  ~ReplacingFile();  // removes the file beside the path unless commit() put it in place

  std::ofstream& out() { return out_; }
  // Whether it opened; else errno says why.
  explicit operator bool() const { return static_cast<bool>(out_); }
  // Closes and renames; false (errno set) where a write, the close or the rename failed,
  // and then nothing was put in place, except where the rename could not replace the
  // path and copying into it in place failed part way (the whole output then stays
  // beside the path: Note [Whole or absent]).
  bool commit();

 private:
  std::string path_;
  std::string beside_;  // the file written; empty where the path itself is
  std::ofstream out_;
  bool committed_ = false;
  bool kept_ = false;  // beside_ is left for the user
};

}  // namespace dtr
