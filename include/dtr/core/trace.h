// trace.h: a recorded training step, as a list of runtime events.
//
// Two on-disk formats map to this one structure (docs/trace-format.md):
//  - DTR's log format (JSON lines, uwsampl/dtr-prototype): CALL, MEMORY, ALIAS, MUTATE,
//    CONSTANT, COPY, COPY_FROM, RELEASE, PIN, ANNOTATE. A CALL is followed by one MEMORY
//    and one ALIAS line per result; a CONSTANT by one MEMORY line. The reader folds those
//    into the CALL/CONSTANT event.
//  - our own format: the same lines after a version header line
//    {"INSTRUCTION":"DTR_TRACE","VERSION":1,...}. The writer emits this format.
//
// Names are interned: every tensor name becomes a dense NameId, so replay indexes arrays
// instead of hashing strings. The reader validates as it goes (a name used before it is
// defined, a result defined twice, a negative or non-numeric size, a MEMORY line that does
// not match its CALL) and throws TraceError with file and line: a trace is input, and bad
// input must never crash the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtr {

using NameId = uint32_t;

enum class TraceEventKind : uint8_t {
  annotate,   // annotation: "START", "BACKWARD" or (version 4) "STEP" (text in `op`)
  call,       // op `op` on `args` produced `results`, taking `time_ns`
  mutate,     // op `op` on `args` mutated args[mutated[i]], taking `time_ns`
  constant,   // results[0] is a new constant (pinned) of results[0].size_bytes
  copy,       // `dst` is a new name for the tensor `src` (one more external reference)
  copy_from,  // `dst` now names the tensor `src`; the tensor `dst` named before is released
  release,    // the external reference `dst` is dropped
  pin,        // the tensor `dst` must stay material from now on
  discard,    // the storage of `dst` is never read again: free it, pinned or not (format v2)
  // PIN with WHEN_MATERIAL (format v3): pin `dst` now if its storage is material, else when
  // it next is (Note [Pins when material] in sim/replay.cpp)
  pin_when_material,
};

const char* trace_event_kind_name(TraceEventKind kind);

struct TraceResult {
  NameId name = 0;
  uint64_t size_bytes = 0;  // as recorded in MEMORY (for an alias: the recorded size, unused)
  int32_t alias = -1;       // index into args of the tensor this result is a view of, or -1
};

struct TraceEvent {
  TraceEventKind kind = TraceEventKind::annotate;
  std::string op;                   // CALL/MUTATE: op name; ANNOTATE: the annotation
  std::vector<NameId> args;         // CALL/MUTATE
  std::vector<TraceResult> results;  // CALL: results; CONSTANT: the one constant
  std::vector<uint32_t> mutated;    // MUTATE: indices into args
  NameId dst = 0;                   // COPY/COPY_FROM/RELEASE/PIN/DISCARD
  NameId src = 0;                   // COPY/COPY_FROM
  uint64_t time_ns = 0;             // CALL/MUTATE
  // CALL: what re-making its results costs, when the host had a cheaper way than running
  // the op again (REMAT_TIME; Note [Remat cost] in eviction/engine.cpp); kSameTime: TIME.
  static constexpr uint64_t kSameTime = ~uint64_t{0};
  uint64_t remat_time_ns = kSameTime;
  // CALL: bytes the op held while it ran beyond its results (WORKSPACE: scratch it allocated
  // and freed before returning, as a convolution's columns); 0: none recorded.
  uint64_t workspace_bytes = 0;
  // CONSTANT: declared where its memory was allocated, before the op that first reads it
  // (EARLY: true; Note [Constants where they were allocated] in
  // integration/torch/recording.cpp, Note [Plans number constants at first read]).
  bool early = false;
  uint32_t line = 0;                // 1-based line of the event's first line in its file
};

struct Trace {
  std::string path;                // file it was read from ("" if built in memory)
  uint32_t version = 0;            // 0: DTR log; >= 1: our format
  std::vector<std::string> names;  // NameId -> tensor name
  std::vector<TraceEvent> events;  // from the START annotation on (START itself kept)
  uint32_t ignored_releases = 0;   // RELEASE of names never defined (DTR's simulator ignores these)

  NameId intern(const std::string& name);  // for building traces in memory

  // intern()'s lookup table, name -> NameId. A cache, not part of the trace's value: the
  // reader leaves it empty and intern() rebuilds it from `names` whenever the two differ in
  // size (Note [Interning] in core/trace_reader.cpp).
  std::unordered_map<std::string, NameId> name_index;
};

// Thrown for malformed input. what() is "FILE:LINE: problem; hint".
class TraceError : public std::runtime_error {
 public:
  TraceError(const std::string& path, uint32_t line, const std::string& problem);
  const std::string& path() const { return path_; }
  uint32_t line() const { return line_; }

 private:
  std::string path_;
  uint32_t line_;
};

constexpr uint32_t kTraceFormatVersion = 4;

// Note [Quantities that sum] in core/trace_reader.cpp: the largest size or time one event
// may give, and the most a trace's sizes, or its times, may add up to. The planner's graph
// files take the same (planner/graph.cpp).
constexpr uint64_t kMaxTraceQuantity = uint64_t{1} << 50;
constexpr uint64_t kMaxTraceSum = uint64_t{1} << 60;

// Note [Reading line by line] in core/trace_reader.cpp: the longest line the reader takes
// (16 MiB), and how much of a name, value or line from the input an error message quotes
// (longer ones end in "...").
constexpr size_t kMaxTraceLineBytes = size_t{16} << 20;
constexpr size_t kMaxQuotedInputChars = 80;

// Whether `trace` declares a constant where its memory was allocated (EARLY), which a
// plan cannot be made from (Note [Plans number constants at first read] in
// core/constant_placement.cpp).
bool has_early_constants(const Trace& trace);

// Reads either format (detected from the first line), one line at a time. Events before
// the first `ANNOTATE START` are skipped, as DTR's simulator does, unless the trace has
// none. A line longer than kMaxTraceLineBytes is a TraceError.
Trace read_trace(const std::string& path);
Trace read_trace(std::istream& in, const std::string& path_for_errors);

// Writes our versioned format; read_trace(write_trace(t)) == t (events and names).
void write_trace(const Trace& trace, std::ostream& out);
void write_trace(const Trace& trace, const std::string& path);

}  // namespace dtr
