// trace_reader.cpp: reads a DTR operator log or our versioned trace into a Trace.
//
// One JSON object per line (docs/trace-format.md). The reader takes the input one line at
// a time (Note [Reading line by line]):
//  1. LineReader hands out non-blank lines, each with its 1-based number;
//  2. lines are held until the first `ANNOTATE START` (Note [The START rule]), then checked
//     as skipped; with no START, the held lines are the events;
//  3. events are read from there on, folding each CALL's MEMORY/ALIAS lines and each
//     CONSTANT's MEMORY line into the event (Note [CALL folding]), interning names as they
//     are defined (Note [Names stay defined]).
// Every problem becomes a TraceError carrying file and line, with a message of the form
// "problem; hint". Nothing here aborts or asserts on input: a trace is data from outside.
//
// Invariant while reading: a name is interned exactly when it has been defined (a CALL
// result, a CONSTANT or a COPY DST), because its first appearance must be a definition.
// So "is defined" is "is in the name table", and NameIds are dense in definition order.

#include "dtr/core/trace.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <istream>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <sys/stat.h>
#include <nlohmann/json.hpp>

namespace dtr {

const char* trace_event_kind_name(TraceEventKind kind) {
  switch (kind) {
    case TraceEventKind::annotate: return "annotate";
    case TraceEventKind::call: return "call";
    case TraceEventKind::mutate: return "mutate";
    case TraceEventKind::constant: return "constant";
    case TraceEventKind::copy: return "copy";
    case TraceEventKind::copy_from: return "copy_from";
    case TraceEventKind::release: return "release";
    case TraceEventKind::pin: return "pin";
    case TraceEventKind::discard: return "discard";
    case TraceEventKind::pin_when_material: return "pin_when_material";
  }
  return "unknown";
}

namespace {

std::string error_text(const std::string& path, uint32_t line, const std::string& problem) {
  return (path.empty() ? std::string("<trace>") : path) + ":" + std::to_string(line) + ": " +
         problem;
}

}  // namespace

TraceError::TraceError(const std::string& path, uint32_t line, const std::string& problem)
    : std::runtime_error(error_text(path, line, problem)), path_(path), line_(line) {}

// Note [Interning]
// ~~~~~~~~~~~~~~~~
// Trace::intern keeps `name_index` as a cache of `names`. Code may fill `names` directly
// (the reader does, and so may tests), so intern() first checks that the cache has as many
// entries as there are names and rebuilds it if not. A `names` vector holding the same
// string twice never matches its cache in size, so intern() stays correct but rebuilds on
// every call; only the reader and intern() add names, and neither adds duplicates.
NameId Trace::intern(const std::string& name) {
  if (name_index.size() != names.size()) {
    name_index.clear();
    name_index.reserve(names.size());
    for (size_t id = 0; id < names.size(); ++id) {
      name_index.emplace(names[id], static_cast<NameId>(id));
    }
  }
  auto [it, inserted] = name_index.emplace(name, static_cast<NameId>(names.size()));
  if (inserted) names.push_back(name);
  return it->second;
}

namespace {

using nlohmann::json;

// Every instruction the reader knows; `header` is our format's first line.
enum class Instruction {
  annotate, call, memory, alias, mutate, constant, copy, copy_from, release, pin, discard,
  header,
};

struct InstructionName {
  std::string_view text;
  Instruction instruction;
};

constexpr InstructionName kInstructions[] = {
    {"CALL", Instruction::call},           {"MEMORY", Instruction::memory},
    {"ALIAS", Instruction::alias},         {"RELEASE", Instruction::release},
    {"COPY", Instruction::copy},           {"CONSTANT", Instruction::constant},
    {"MUTATE", Instruction::mutate},       {"COPY_FROM", Instruction::copy_from},
    {"ANNOTATE", Instruction::annotate},   {"PIN", Instruction::pin},
    {"DISCARD", Instruction::discard},
    {"DTR_TRACE", Instruction::header},
};

constexpr const char* kValidInstructions =
    "ANNOTATE, CALL, MEMORY, ALIAS, MUTATE, CONSTANT, COPY, COPY_FROM, RELEASE, PIN, DISCARD "
    "(and DTR_TRACE as the header on the first line)";

constexpr const char* kFieldsHint =
    "see docs/trace-format.md for the fields of each instruction";

constexpr const char* kDefinitionHint =
    "a name is defined by a CALL RESULT, a CONSTANT NAME or a COPY DST";

struct SourceLine {
  std::string text;     // without its '\n'
  uint32_t number = 0;  // 1-based
};

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

// Note [Reading line by line]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The reader took the whole file into memory and split it there, so `dtr-sim run --trace
// /dev/zero` grew until the allocator aborted, and a line holding a 50 MB name came back
// whole in its error (the seventy-sixth session's probe). Now LineReader hands out one
// line at a time and refuses one longer than kMaxTraceLineBytes (16 MiB) with its number,
// before it has read more than that. DTR's logs' lines are under 200 bytes; ours are
// longest at a foreach op over every parameter (54,101 bytes for an Adam step over 3000
// parameters, the review's measure), so the cap holds one over some 900,000. And every
// name, value or line an error quotes from the input is cut to kMaxQuotedInputChars
// (quote_input). Lines are numbered and split as before: at each '\n', a last line without
// one counted, blank lines counted but not handed out.
//
// The one thing held is the run of lines before the first `ANNOTATE START`: whether they
// are skipped or read as events depends on whether a START follows (Note [The START
// rule]), so they wait until one does or the file ends. DTR's logs open with START, and so
// do the traces we record, so nothing waits in them.
class LineReader {
 public:
  LineReader(std::istream& in, const std::string& path) : in_(in), path_(path) {}

  // The next non-blank line, or false at the end of the input.
  bool next(SourceLine& line) {
    while (read_line(line.text)) {
      line.number = number_;
      if (!is_blank(line.text)) return true;
    }
    return false;
  }

 private:
  static constexpr size_t kChunkBytes = 64 * 1024;

  // The next line, blank or not; false when the input has none left.
  bool read_line(std::string& text) {
    text.clear();
    bool any = false;  // a character or a '\n' taken for this line
    while (true) {
      if (begin_ == end_ && !refill()) {
        if (any) ++number_;
        return any;
      }
      const char* start = buffer_.data() + begin_;
      const char* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
      const size_t length = newline ? static_cast<size_t>(newline - start) : end_ - begin_;
      if (text.size() + length > kMaxTraceLineBytes) too_long();
      text.append(start, length);
      begin_ += length;
      any = true;
      if (newline) {
        ++begin_;
        ++number_;
        return true;
      }
    }
  }

  bool refill() {
    if (at_end_) return false;
    if (buffer_.empty()) buffer_.resize(kChunkBytes);
    in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    if (in_.bad()) throw TraceError(path_, 0, "cannot read trace; the stream failed");
    begin_ = 0;
    end_ = static_cast<size_t>(in_.gcount());
    if (end_ < buffer_.size()) at_end_ = true;
    return end_ > 0;
  }

  [[noreturn]] void too_long() const {
    throw TraceError(path_, number_ + 1,
                     "line " + std::to_string(number_ + 1) + " is longer than " +
                         std::to_string(kMaxTraceLineBytes >> 20) +
                         " MiB, the most this reader takes (kMaxTraceLineBytes); a trace "
                         "has one JSON object per line, each far shorter: is this a trace file?");
  }

  std::istream& in_;
  const std::string& path_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;  // the unread part of buffer_
  bool at_end_ = false;         // the input gave less than asked: nothing more to read
  uint32_t number_ = 0;         // lines taken so far
};

// At most kMaxQuotedInputChars of `text`, for an error message (Note [Reading line by
// line]); cut where a UTF-8 character starts, and marked "...".
std::string quote_input(std::string_view text) {
  if (text.size() <= kMaxQuotedInputChars) return std::string(text);
  size_t cut = kMaxQuotedInputChars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

// Note [Numbers as strings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// DTR's logs write MEMORY, TIME and ALIAS as strings ("MEMORY":"1024", "ALIAS":"-1"), and
// its simulator converts them with Python's int(). We accept a JSON number or a string of
// decimal digits with an optional leading '-', for every integer field. A float is accepted
// only when it has no fraction (1024.0, 1e6): sizes, times and indices are counts. Strings
// get no such leniency: "1.5", " 12", "0x10" and "" are not numbers. Negative values are
// classified separately so that each field can say what it allows (ALIAS allows -1).
struct Integer {
  enum class Status { ok, not_a_number, fractional, too_large };
  Status status = Status::ok;
  bool negative = false;
  uint64_t magnitude = 0;
};

Integer parse_integer(const json& value) {
  Integer result;
  if (value.is_number_unsigned()) {
    result.magnitude = value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    result.negative = v < 0;
    // Written so that INT64_MIN does not overflow.
    result.magnitude = v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  } else if (value.is_number_float()) {
    double v = value.get<double>();
    if (!std::isfinite(v)) {
      result.status = Integer::Status::not_a_number;
    } else if (v != std::floor(v)) {
      result.status = Integer::Status::fractional;
    } else if (std::fabs(v) >= 18446744073709551616.0) {  // 2^64
      result.status = Integer::Status::too_large;
    } else {
      result.negative = v < 0;
      result.magnitude = static_cast<uint64_t>(std::fabs(v));
    }
  } else if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    std::string_view digits(text);
    if (!digits.empty() && digits.front() == '-') {
      result.negative = true;
      digits.remove_prefix(1);
    }
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
      result.status = Integer::Status::not_a_number;
      return result;
    }
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(),
                                     result.magnitude);
    if (ec == std::errc::result_out_of_range) result.status = Integer::Status::too_large;
    if (ec != std::errc() || end != digits.data() + digits.size()) {
      if (result.status == Integer::Status::ok) result.status = Integer::Status::not_a_number;
    }
    if (result.magnitude == 0) result.negative = false;  // "-0" is 0
  } else {
    result.status = Integer::Status::not_a_number;
  }
  return result;
}

std::string json_type_name(const json& value) {
  if (value.is_number_integer() || value.is_number_unsigned()) return "an integer";
  if (value.is_number_float()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_null()) return "null";
  if (value.is_array()) return "an array";
  return "an object";
}

// Turns nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 7: x"
// into "column 7: x": the line number there is always 1 (we parse one line at a time).
// The text it ends with ("last read: '...'") is the input's, so it is cut (quote_input).
std::string describe_parse_error(const json::parse_error& error) {
  std::string what = error.what();
  size_t column = what.find("column ");
  if (column != std::string::npos) what = what.substr(column);
  constexpr std::string_view kLastRead = "last read: '";
  const size_t last_read = what.find(kLastRead);
  if (last_read == std::string::npos) return what;
  const size_t begin = last_read + kLastRead.size();
  std::string_view read = std::string_view(what).substr(begin);
  if (!read.empty() && read.back() == '\'') read.remove_suffix(1);
  return what.substr(0, begin) + quote_input(read) + "'";
}

// Note [The START rule]
// ~~~~~~~~~~~~~~~~~~~~~
// DTR's simulator (simrd's parse_file(start=True)) discards every line before the first
// `ANNOTATE START`: those lines set up the model and are not part of the measured step. We
// do the same, and the discarded lines define nothing: a later use of a name they defined
// is an error, as it is there. The START annotation itself is kept as the first event, so
// write_trace() writes it back and a re-read skips nothing. A trace with no START keeps all
// its events (simrd would fail on it; our own synthetic traces need no START).
//
// Skipped lines are still checked to be JSON objects with a known INSTRUCTION, as simrd
// parses every line before looking for START, but nothing else about them is checked.
//
// To find START without parsing every line twice, only lines that mention START, or that
// contain a backslash (which could spell START as an escape), are parsed in the search.
// The lines before START are held until it comes (Note [Reading line by line]).

// Note [CALL folding]
// ~~~~~~~~~~~~~~~~~~~
// DTR logs a CALL with N results as 1 + 2N lines:
//   CALL {NAME, ARGS, RESULT: [r0, r1], TIME}
//   MEMORY {NAME: r0, MEMORY}   ALIAS {NAME: r0, ALIAS}
//   MEMORY {NAME: r1, MEMORY}   ALIAS {NAME: r1, ALIAS}
// that is, MEMORY then ALIAS for each result in order, exactly the order simrd pops them
// in. The reader insists on this order and on matching names, and folds the lines into
// one `call` event whose results carry size and alias. A CONSTANT is folded the same way
// with its one MEMORY line. Blank lines in between are allowed (they are skipped like any
// blank line). A MEMORY or ALIAS line anywhere else is an error.

// Note [Names stay defined]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A RELEASE drops an external reference; it does not undefine the name. DTR's logs never
// reuse a name, so we keep the rule simple: once defined, a name stays defined, and any
// second definition (CALL result, CONSTANT, COPY DST) is an error, released or not. A
// RELEASE of a name that was never defined is not an error: simrd ignores it
// (ignore_undefined_release=True), so we drop the event and count it in
// Trace::ignored_releases; so is a second RELEASE of one name (the replay would drop a
// reference another name holds, after a COPY). A released name is the program's no more:
// a later read of it (an ARG, a COPY's SRC, a MUTATE, a PIN) is an error, as is a read
// after a DISCARD; a DISCARD may follow its RELEASE. The replay trusted this order, and a
// read after a RELEASE crashed it (a segfault, found by a fuzzer of hand-made traces,
// 2026-12-07; before, the engine's checks aborted on a COPY of a released name).
//
// Note [Quantities that sum]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Sizes and times are summed everywhere (live bytes, an op's outputs and scratch, a
// step's compute), in 64 bits. A WORKSPACE of 2^64-1 wrapped the engine's room request
// and aborted a replay on its budget check, two TIMEs of 2^64-1 summed to a baseline
// below either. So a size or time above 2^50 (1 PiB; 13 days in nanoseconds) is refused,
// and so is a trace whose sizes, or times, add up to more than 2^60: 16 384 TIMEs of 2^50
// wrapped the baseline's compute (a probe, 2026-12-07). Each of those sums is below 2^60,
// and no tool adds more than a few of them together.
class TraceParser {
 public:
  TraceParser(std::istream& in, const std::string& path) : path_(path), reader_(in, path_) {
    trace_.path = path;
  }

  Trace parse() {
    SourceLine line;
    bool have = reader_.next(line);
    if (!have) {
      fail(0, "empty trace; the file has no events (expected JSON lines such as "
              "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"})");
    }
    {
      json first = parse_object(line);
      if (instruction_of(first) == Instruction::header) {
        read_header(first);
        have = reader_.next(line);
      }
    }
    // Note [The START rule]: hold the lines up to the first START; if one comes, they
    // were skipped, and the events start there; if none does, they are the events.
    while (have && !is_start(line.text)) {
      held_.push_back(std::move(line));
      have = reader_.next(line);
    }
    if (have) {
      for (const SourceLine& skipped : held_) check_skipped_line(skipped);
      if (!held_.empty()) skipped_until_line_ = line.number;
      held_ = {};
      read_event(line);
    }
    while (next_line(line)) read_event(line);
    return std::move(trace_);
  }

 private:
  [[noreturn]] void fail(uint32_t line, const std::string& problem) const {
    throw TraceError(path_, line, problem);
  }
  [[noreturn]] void fail(const std::string& problem) const { fail(line_, problem); }

  // Parses one line; sets the context (line_, instruction_) used by error messages.
  json parse_object(const SourceLine& line) {
    line_ = line.number;
    instruction_ = "line";
    json value;
    try {
      value = json::parse(line.text.data(), line.text.data() + line.text.size());
    } catch (const json::parse_error& error) {
      fail("bad JSON at " + describe_parse_error(error) +
           "; each line must be one complete JSON object");
    } catch (const json::out_of_range&) {  // 1e999: nlohmann's 406, which named no line
      fail(
          "a number on this line is out of range (not finite as a double); sizes and "
          "times are whole numbers");
    }
    if (!value.is_object()) {
      fail("line is not a JSON object (it is " + json_type_name(value) +
           "); each line must be one object with an \"INSTRUCTION\" field");
    }
    return value;
  }

  Instruction instruction_of(const json& object) {
    auto it = object.find("INSTRUCTION");
    if (it == object.end()) {
      fail("missing field 'INSTRUCTION'; every line needs one of " +
           std::string(kValidInstructions));
    }
    if (!it->is_string()) {
      fail("field 'INSTRUCTION' must be a string, not " + json_type_name(*it) + "; one of " +
           kValidInstructions);
    }
    const std::string& text = it->get_ref<const std::string&>();
    for (const InstructionName& entry : kInstructions) {
      if (entry.text == text) {
        instruction_ = entry.text.data();
        return entry.instruction;
      }
    }
    fail("unknown INSTRUCTION '" + quote_input(text) +
         "'; valid instructions: " + kValidInstructions);
  }

  const json& field(const json& object, const char* key) {
    auto it = object.find(key);
    if (it == object.end()) {
      fail("missing field '" + std::string(key) + "' in " + instruction_ + "; " + kFieldsHint);
    }
    return *it;
  }

  const std::string& string_value(const json& value, const std::string& what) {
    if (!value.is_string()) {
      fail(what + " in " + instruction_ + " must be a string, not " + json_type_name(value) +
           "; " + kFieldsHint);
    }
    return value.get_ref<const std::string&>();
  }

  const std::string& string_field(const json& object, const char* key) {
    return string_value(field(object, key), "field '" + std::string(key) + "'");
  }

  const json::array_t& array_field(const json& object, const char* key) {
    const json& value = field(object, key);
    if (!value.is_array()) {
      fail("field '" + std::string(key) + "' in " + instruction_ + " must be an array, not " +
           json_type_name(value) + "; " + kFieldsHint);
    }
    return value.get_ref<const json::array_t&>();
  }

  // An integer field (Note [Numbers as strings]); returns it with the sign applied through
  // `negative`, after rejecting the malformed forms.
  Integer integer_value(const json& value, const std::string& what) {
    Integer result = parse_integer(value);
    switch (result.status) {
      case Integer::Status::ok: break;
      case Integer::Status::not_a_number:
        fail(what + " in " + instruction_ + " is not a whole number (" + quote_input(value.dump()) +
             "); write it as an integer or a string of digits, e.g. \"1024\"");
      case Integer::Status::fractional:
        fail(what + " in " + instruction_ + " has a fraction (" + quote_input(value.dump()) +
             "); sizes, times and indices are whole numbers");
      case Integer::Status::too_large:
        fail(what + " in " + instruction_ + " is too large (" + quote_input(value.dump()) +
             "); it must fit in 64 bits");
    }
    return result;
  }

  uint64_t count_field(const json& object, const char* key, const char* unit) {
    const json& value = field(object, key);
    std::string what = "field '" + std::string(key) + "'";
    Integer result = integer_value(value, what);
    if (result.negative) {
      fail(what + " in " + instruction_ + " is negative (" + quote_input(value.dump()) +
           "); it is a count of " + unit);
    }
    // Note [Quantities that sum]: each value, and each kind's sum over the trace.
    const std::string_view u(unit);
    if (u == "bytes" || u == "nanoseconds") {
      if (result.magnitude > kMaxTraceQuantity)
        fail(what + " in " + instruction_ + " is " + quote_input(value.dump()) + " " + unit +
             ", above the 2^50 (" + (u == "bytes" ? "1 PiB" : "13 days") +
             ") this reader takes: the tools sum such " +
             "values, and sums of larger ones overflow; a real trace's are far smaller");
      uint64_t& sum = u == "bytes" ? bytes_sum_ : nanoseconds_sum_;
      sum += result.magnitude;
      if (sum > kMaxTraceSum)
        fail(what + " in " + instruction_ + " brings the trace's " + unit +
             " to more than 2^60 in all, which the tools' sums cannot hold; a real trace's "
             "are far fewer");
    }
    return result.magnitude;
  }

  NameId use(const std::string& name, const char* role) {
    auto it = ids_.find(name);
    if (it == ids_.end()) {
      std::string problem = "name '" + quote_input(name) + "' used before it is defined (" + role +
                            " of " + instruction_ + "); " + kDefinitionHint;
      if (skipped_until_line_ != 0) {
        problem += "; lines before the ANNOTATE START on line " +
                   std::to_string(skipped_until_line_) + " are skipped and define nothing";
      }
      fail(problem);
    }
    // Note [Names stay defined]: defined, but no longer the program's to read.
    for (const auto& [lines, what] :
         {std::pair{&released_lines_, "RELEASE"}, std::pair{&discarded_lines_, "DISCARD"}}) {
      if ((*lines)[it->second] != 0)
        fail("name '" + quote_input(name) + "' is used (" + role + " of " + instruction_ +
             ") after its " + what + " on line " + std::to_string((*lines)[it->second]) +
             "; a released name is one the program dropped, and a discarded one nothing reads " +
             "again: the trace's events are out of order");
    }
    return it->second;
  }

  NameId define(const std::string& name, const char* role) {
    auto [it, inserted] = ids_.emplace(name, static_cast<NameId>(trace_.names.size()));
    if (!inserted) {
      fail("name '" + quote_input(name) + "' is defined twice (" + role + " of " + instruction_ +
           "; first defined on line " + std::to_string(definition_lines_[it->second]) +
           "); names are never reused, even after a RELEASE");
    }
    trace_.names.push_back(name);
    definition_lines_.push_back(line_);
    released_lines_.push_back(0);
    discarded_lines_.push_back(0);
    return it->second;
  }

  std::vector<NameId> use_all(const json::array_t& names, const char* role) {
    std::vector<NameId> ids;
    ids.reserve(names.size());
    for (const json& name : names) {
      ids.push_back(use(string_value(name, "each entry of '" + std::string(role) + "'"), role));
    }
    return ids;
  }

  void read_header(const json& header) {
    uint64_t version = count_field(header, "VERSION", "format revisions");
    if (version == 0) {
      fail("trace format version 0 in a DTR_TRACE header; versions start at 1 (a DTR log has "
           "no header line)");
    }
    if (version > kTraceFormatVersion) {
      fail("trace format version " + std::to_string(version) +
           " is newer than this build supports (" + std::to_string(kTraceFormatVersion) +
           "); use a newer dtr to read it");
    }
    trace_.version = static_cast<uint32_t>(version);
  }

  // Whether `text` is an `ANNOTATE START` line (Note [The START rule]).
  static bool is_start(std::string_view text) {
    if (text.find("START") == std::string_view::npos && text.find('\\') == std::string_view::npos) {
      return false;
    }
    json value = json::parse(text.data(), text.data() + text.size(), nullptr, false);
    if (!value.is_object()) return false;  // also a parse failure; reported in its turn
    auto instruction = value.find("INSTRUCTION");
    auto annotation = value.find("ANNOTATION");
    return instruction != value.end() && annotation != value.end() && *instruction == "ANNOTATE" &&
           *annotation == "START";
  }

  // The next line to read as (part of) an event: a held one (a trace with no START), or
  // the reader's next.
  bool next_line(SourceLine& line) {
    if (held_.empty()) return reader_.next(line);
    line = std::move(held_.front());
    held_.pop_front();
    return true;
  }

  void check_skipped_line(const SourceLine& line) {
    if (instruction_of(parse_object(line)) == Instruction::header) header_not_first();
  }

  [[noreturn]] void header_not_first() {
    fail("DTR_TRACE header after the first line; the header may only be the first line");
  }

  // The next non-blank line, which must be `expected` (MEMORY or ALIAS) for result `name`
  // of the CALL or CONSTANT on line `owner_line` (Note [CALL folding]).
  json take_folded_line(Instruction expected, const char* expected_text, const std::string& name,
                        const char* owner, uint32_t owner_line) {
    std::string context = std::string(owner) + " on line " + std::to_string(owner_line);
    const char* rule = expected == Instruction::memory && std::string_view(owner) == "CONSTANT"
                           ? "a CONSTANT is followed by one MEMORY line with the same NAME"
                           : "a CALL is followed by a MEMORY then an ALIAS line for each result, "
                             "in the order of RESULT";
    SourceLine line;
    if (!next_line(line)) {
      fail(owner_line, "file ends inside " + context + ": expected a " + expected_text +
                           " line for '" + quote_input(name) + "'; " + rule);
    }
    json object = parse_object(line);
    Instruction found = instruction_of(object);
    if (found != expected) {
      fail("expected a " + std::string(expected_text) + " line for '" + quote_input(name) +
           "' of " + context + ", found " + instruction_ + "; " + rule);
    }
    const std::string& found_name = string_field(object, "NAME");
    if (found_name != name) {
      fail(std::string(expected_text) + " line names '" + quote_input(found_name) + "' but " +
           context + " expects '" + quote_input(name) + "' here; " + rule);
    }
    return object;
  }

  void read_event(const SourceLine& line) {
    json object = parse_object(line);
    switch (instruction_of(object)) {
      case Instruction::header: header_not_first();
      case Instruction::memory:
      case Instruction::alias:
        fail(std::string("stray ") + instruction_ + " line; MEMORY and ALIAS lines only follow "
             "a CALL (MEMORY then ALIAS per result) or a CONSTANT (one MEMORY)");
      case Instruction::annotate: return read_annotate(object);
      case Instruction::call: return read_call(object);
      case Instruction::mutate: return read_mutate(object);
      case Instruction::constant: return read_constant(object);
      case Instruction::copy: return read_copy(object, TraceEventKind::copy);
      case Instruction::copy_from: return read_copy(object, TraceEventKind::copy_from);
      case Instruction::release: return read_release(object);
      case Instruction::pin: return read_pin(object);
      case Instruction::discard: return read_discard(object);
    }
  }

  TraceEvent& add_event(TraceEventKind kind) {
    TraceEvent& event = trace_.events.emplace_back();
    event.kind = kind;
    event.line = line_;
    return event;
  }

  void read_annotate(const json& object) {
    const std::string& annotation = string_field(object, "ANNOTATION");
    if (annotation == "STEP" && trace_.version < 4) {
      fail("ANNOTATION 'STEP' needs a DTR_TRACE header of version 4 or later (this trace's: " +
           std::to_string(trace_.version) +
           "); start the file with {\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}");
    }
    if (annotation != "START" && annotation != "BACKWARD" && annotation != "STEP") {
      fail("unknown ANNOTATION '" + quote_input(annotation) +
           "'; valid annotations: START, BACKWARD, STEP");
    }
    add_event(TraceEventKind::annotate).op = annotation;
  }

  void read_call(const json& object) {
    uint32_t call_line = line_;
    TraceEvent event;
    event.kind = TraceEventKind::call;
    event.line = call_line;
    event.op = string_field(object, "NAME");
    event.args = use_all(array_field(object, "ARGS"), "ARGS");
    event.time_ns = count_field(object, "TIME", "nanoseconds");
    if (object.contains("REMAT_TIME")) {
      event.remat_time_ns = count_field(object, "REMAT_TIME", "nanoseconds");
      if (event.remat_time_ns == TraceEvent::kSameTime)
        fail("field 'REMAT_TIME' in CALL is too large; it is a count of nanoseconds");
    }
    if (object.contains("WORKSPACE"))
      event.workspace_bytes = count_field(object, "WORKSPACE", "bytes");
    const json::array_t& results = array_field(object, "RESULT");
    event.results.reserve(results.size());
    for (const json& result : results) {
      TraceResult folded;
      folded.name = define(string_value(result, "each entry of 'RESULT'"), "RESULT");
      event.results.push_back(folded);
    }
    for (TraceResult& result : event.results) {
      const std::string& name = trace_.names[result.name];
      json memory = take_folded_line(Instruction::memory, "MEMORY", name, "CALL", call_line);
      result.size_bytes = count_field(memory, "MEMORY", "bytes");
      json alias = take_folded_line(Instruction::alias, "ALIAS", name, "CALL", call_line);
      const json& value = field(alias, "ALIAS");
      Integer index = integer_value(value, "field 'ALIAS'");
      bool none = index.negative && index.magnitude == 1;
      if (!none && (index.negative || index.magnitude >= event.args.size())) {
        fail("ALIAS index " + quote_input(value.dump()) + " is out of range: the CALL on line " +
             std::to_string(call_line) + " has " + std::to_string(event.args.size()) +
             " ARGS; use an index into ARGS, or -1 for a result that aliases nothing");
      }
      result.alias = none ? -1 : static_cast<int32_t>(index.magnitude);
    }
    trace_.events.push_back(std::move(event));
  }

  void read_mutate(const json& object) {
    TraceEvent event;
    event.kind = TraceEventKind::mutate;
    event.line = line_;
    event.op = string_field(object, "NAME");
    event.args = use_all(array_field(object, "ARGS"), "ARGS");
    const json::array_t& mutated = array_field(object, "MUTATE");
    if (mutated.empty())
      fail(
          "MUTATE's list 'MUTATE' is empty; it names the ARGS the op writes (indices into "
          "ARGS): an op that writes none of its arguments is a CALL");
    event.mutated.reserve(mutated.size());
    for (const json& value : mutated) {
      Integer index = integer_value(value, "each entry of 'MUTATE'");
      if (index.negative || index.magnitude >= event.args.size()) {
        fail("MUTATE index " + quote_input(value.dump()) + " is out of range: the MUTATE has " +
             std::to_string(event.args.size()) + " ARGS; each entry is an index into ARGS");
      }
      event.mutated.push_back(static_cast<uint32_t>(index.magnitude));
    }
    event.time_ns = count_field(object, "TIME", "nanoseconds");
    trace_.events.push_back(std::move(event));
  }

  void read_constant(const json& object) {
    uint32_t constant_line = line_;
    TraceResult result;
    result.name = define(string_field(object, "NAME"), "NAME");
    json memory = take_folded_line(Instruction::memory, "MEMORY", trace_.names[result.name],
                                   "CONSTANT", constant_line);
    result.size_bytes = count_field(memory, "MEMORY", "bytes");
    TraceEvent& event = add_event(TraceEventKind::constant);
    event.line = constant_line;
    event.results.push_back(result);
    // Note [Plans number constants at first read] in core/constant_placement.cpp
    const auto early = object.find("EARLY");
    if (early != object.end()) {
      if (!early->is_boolean())
        fail("CONSTANT's EARLY must be true or false, not " + quote_input(early->dump()));
      event.early = early->get<bool>();
    }
  }

  void read_copy(const json& object, TraceEventKind kind) {
    NameId src = use(string_field(object, "SRC"), "SRC");
    NameId dst = kind == TraceEventKind::copy ? define(string_field(object, "DST"), "DST")
                                              : use(string_field(object, "DST"), "DST");
    TraceEvent& event = add_event(kind);
    event.src = src;
    event.dst = dst;
  }

  void read_release(const json& object) {
    auto it = ids_.find(string_field(object, "NAME"));
    // Note [Names stay defined]: a name never defined, or released already.
    if (it == ids_.end() || released_lines_[it->second] != 0) {
      ++trace_.ignored_releases;
      return;
    }
    released_lines_[it->second] = line_;
    add_event(TraceEventKind::release).dst = it->second;
  }

  void read_pin(const json& object) {
    NameId name = use(string_field(object, "NAME"), "NAME");
    bool when_material = false;
    if (object.contains("WHEN_MATERIAL")) {
      const json& field = object["WHEN_MATERIAL"];
      if (!field.is_boolean())
        fail("field 'WHEN_MATERIAL' in PIN must be true or false, not " +
             quote_input(field.dump()));
      when_material = field.get<bool>();
    }
    add_event(when_material ? TraceEventKind::pin_when_material : TraceEventKind::pin).dst = name;
  }

  void read_discard(const json& object) {
    const std::string& text = string_field(object, "NAME");
    auto it = ids_.find(text);
    // A released name may be discarded (the host found its storage dead after the
    // program dropped it); anything else is a use.
    const NameId name =
        it != ids_.end() && released_lines_[it->second] != 0 ? it->second : use(text, "NAME");
    if (discarded_lines_[name] == 0) discarded_lines_[name] = line_;
    add_event(TraceEventKind::discard).dst = name;
  }

  std::string path_;
  LineReader reader_;
  std::deque<SourceLine> held_;    // lines before the first START, while none has come
  uint32_t line_ = 0;              // number of the line being read, for errors
  const char* instruction_ = "";  // its INSTRUCTION, for errors
  uint32_t skipped_until_line_ = 0;  // line of START when lines before it were skipped
  uint64_t bytes_sum_ = 0, nanoseconds_sum_ = 0;  // Note [Quantities that sum]
  Trace trace_;
  std::unordered_map<std::string, NameId> ids_;  // name -> NameId, for defined names
  std::vector<uint32_t> definition_lines_;       // NameId -> line that defined it
  std::vector<uint32_t> released_lines_;         // NameId -> line of its RELEASE, or 0
  std::vector<uint32_t> discarded_lines_;        // NameId -> line of its DISCARD, or 0
};

}  // namespace

Trace read_trace(std::istream& in, const std::string& path_for_errors) {
  return TraceParser(in, path_for_errors).parse();
}

Trace read_trace(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw TraceError(path, 0, "is a directory; give a trace file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path, 0, "cannot open trace file; check the path and permissions");
  return read_trace(in, path);
}

}  // namespace dtr
