// test_trace.cpp: the trace reader and writer (core/trace_reader.cpp, core/trace_writer.cpp).
//
// Hand-written inputs live in tests/data/traces/: good.log (DTR's format, every instruction,
// pre-START lines, blank lines, numbers both as strings and as JSON numbers), good_v1.trace
// (our header), no_start.log, and one small file per malformed-input case, each checked
// for the line number and the words of its TraceError. The three real DTR logs are read
// when DTR_LOG_DIR holds them; the counts checked against them were taken with grep and
// a short independent script (events are counted from START on).

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "dtr/core/trace.h"
#include "test_support.h"

namespace {

std::string trace_data(const std::string& file) {
  return std::string(DTR_TEST_DATA_DIR) + "/traces/" + file;
}

const dtr::Trace& good_trace() {
  static const dtr::Trace trace = dtr::read_trace(trace_data("good.log"));
  return trace;
}

std::string name_of(const dtr::Trace& trace, dtr::NameId id) {
  REQUIRE(id < trace.names.size());
  return trace.names[id];
}

std::vector<std::string> names_of(const dtr::Trace& trace, const std::vector<dtr::NameId>& ids) {
  std::vector<std::string> names;
  for (dtr::NameId id : ids) names.push_back(name_of(trace, id));
  return names;
}

// Everything but TraceEvent::line and Trace::path, which describe the file.
void require_same_trace(const dtr::Trace& a, const dtr::Trace& b) {
  REQUIRE(a.names == b.names);
  REQUIRE(a.events.size() == b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    INFO("event " << i << " (line " << a.events[i].line << " vs " << b.events[i].line << ")");
    const dtr::TraceEvent& x = a.events[i];
    const dtr::TraceEvent& y = b.events[i];
    REQUIRE(x.kind == y.kind);
    REQUIRE(x.op == y.op);
    REQUIRE(x.args == y.args);
    REQUIRE(x.results.size() == y.results.size());
    for (size_t r = 0; r < x.results.size(); ++r) {
      REQUIRE(x.results[r].name == y.results[r].name);
      REQUIRE(x.results[r].size_bytes == y.results[r].size_bytes);
      REQUIRE(x.results[r].alias == y.results[r].alias);
    }
    REQUIRE(x.mutated == y.mutated);
    REQUIRE(x.dst == y.dst);
    REQUIRE(x.src == y.src);
    REQUIRE(x.time_ns == y.time_ns);
    REQUIRE(x.remat_time_ns == y.remat_time_ns);
    REQUIRE(x.workspace_bytes == y.workspace_bytes);
  }
}

dtr::Trace round_trip(const dtr::Trace& trace) {
  std::stringstream buffer;
  dtr::write_trace(trace, buffer);
  return dtr::read_trace(buffer, "round-trip");
}

size_t count_kind(const dtr::Trace& trace, dtr::TraceEventKind kind) {
  size_t n = 0;
  for (const dtr::TraceEvent& event : trace.events) n += event.kind == kind;
  return n;
}

}  // namespace

TEST_CASE("trace: event kinds have names", "[core][trace]") {
  CHECK(std::string(dtr::trace_event_kind_name(dtr::TraceEventKind::annotate)) == "annotate");
  CHECK(std::string(dtr::trace_event_kind_name(dtr::TraceEventKind::call)) == "call");
  CHECK(std::string(dtr::trace_event_kind_name(dtr::TraceEventKind::copy_from)) == "copy_from");
  CHECK(std::string(dtr::trace_event_kind_name(dtr::TraceEventKind::pin)) == "pin");
}

TEST_CASE("trace: intern gives dense ids in order of first appearance", "[core][trace]") {
  dtr::Trace trace;
  CHECK(trace.intern("a") == 0);
  CHECK(trace.intern("b") == 1);
  CHECK(trace.intern("a") == 0);
  trace.names.push_back("c");  // filled directly, as the reader does: intern() catches up
  CHECK(trace.intern("c") == 2);
  CHECK(trace.intern("d") == 3);
  CHECK(trace.names == std::vector<std::string>{"a", "b", "c", "d"});

  dtr::Trace copy = trace;
  CHECK(copy.intern("b") == 1);
  CHECK(copy.intern("e") == 4);
  CHECK(trace.names.size() == 4);
}

TEST_CASE("trace: TraceError says FILE:LINE: problem", "[core][trace]") {
  dtr::TraceError error("model.log", 12, "bad thing; fix it");
  CHECK(std::string(error.what()) == "model.log:12: bad thing; fix it");
  CHECK(error.path() == "model.log");
  CHECK(error.line() == 12);
}

TEST_CASE("trace: reads a hand-written DTR log", "[core][trace]") {
  const dtr::Trace& trace = good_trace();
  using Kind = dtr::TraceEventKind;

  CHECK(trace.version == 0);
  CHECK(trace.path == trace_data("good.log"));
  // Lines 1-3 come before START: skipped, and `setup0` is never interned.
  CHECK(trace.names == std::vector<std::string>{"w", "w1", "x", "y", "yv", "g"});
  // RELEASE never_defined (line 18) and RELEASE setup0 (line 25, defined before START).
  CHECK(trace.ignored_releases == 2);

  const std::vector<Kind> kinds = {Kind::annotate, Kind::constant, Kind::copy,     Kind::release,
                                   Kind::constant, Kind::call,     Kind::mutate,   Kind::annotate,
                                   Kind::call,     Kind::copy_from, Kind::pin,     Kind::release};
  const std::vector<uint32_t> lines = {4, 5, 7, 8, 10, 12, 17, 19, 20, 23, 24, 26};
  REQUIRE(trace.events.size() == kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    INFO("event " << i);
    CHECK(trace.events[i].kind == kinds[i]);
    CHECK(trace.events[i].line == lines[i]);
  }

  const auto& start = trace.events[0];
  CHECK(start.op == "START");

  const auto& w = trace.events[1];
  REQUIRE(w.results.size() == 1);
  CHECK(name_of(trace, w.results[0].name) == "w");
  CHECK(w.results[0].size_bytes == 1024);

  const auto& copy = trace.events[2];
  CHECK(name_of(trace, copy.dst) == "w1");
  CHECK(name_of(trace, copy.src) == "w");

  CHECK(name_of(trace, trace.events[3].dst) == "w");
  CHECK(trace.events[4].results.at(0).size_bytes == 4096);  // MEMORY as a JSON number

  const auto& call = trace.events[5];
  CHECK(call.op == "split_matmul");
  CHECK(names_of(trace, call.args) == std::vector<std::string>{"x", "w1"});
  CHECK(call.time_ns == 1500);  // TIME as a string
  REQUIRE(call.results.size() == 2);
  CHECK(name_of(trace, call.results[0].name) == "y");
  CHECK(call.results[0].size_bytes == 2048);
  CHECK(call.results[0].alias == -1);
  CHECK(name_of(trace, call.results[1].name) == "yv");
  CHECK(call.results[1].size_bytes == 4096);
  CHECK(call.results[1].alias == 0);  // a view of args[0], "x"

  const auto& mutate = trace.events[6];
  CHECK(mutate.op == "add_");
  CHECK(names_of(trace, mutate.args) == std::vector<std::string>{"y", "x"});
  CHECK(mutate.mutated == std::vector<uint32_t>{0});
  CHECK(mutate.time_ns == 250);
  CHECK(mutate.results.empty());

  CHECK(trace.events[7].op == "BACKWARD");
  CHECK(trace.events[8].op == "relu_backward");
  CHECK(trace.events[8].time_ns == 1000);  // 1e3: a float without a fraction

  const auto& copy_from = trace.events[9];
  CHECK(name_of(trace, copy_from.dst) == "g");
  CHECK(name_of(trace, copy_from.src) == "yv");
  CHECK(name_of(trace, trace.events[10].dst) == "g");
  CHECK(name_of(trace, trace.events[11].dst) == "y");
}

TEST_CASE("trace: a trace without START keeps every event", "[core][trace]") {
  dtr::Trace trace = dtr::read_trace(trace_data("no_start.log"));
  REQUIRE(trace.events.size() == 3);
  CHECK(trace.events[0].kind == dtr::TraceEventKind::constant);
  CHECK(trace.events[0].line == 1);
  CHECK(trace.events[1].kind == dtr::TraceEventKind::call);
  CHECK(trace.events[2].kind == dtr::TraceEventKind::release);
  CHECK(trace.ignored_releases == 0);
}

TEST_CASE("trace: reads our versioned format", "[core][trace]") {
  dtr::Trace trace = dtr::read_trace(trace_data("good_v1.trace"));
  CHECK(trace.version == 1);
  CHECK(trace.names == std::vector<std::string>{"a", "b"});
  REQUIRE(trace.events.size() == 4);
  CHECK(trace.events[0].line == 2);  // the header is line 1
  const auto& no_results = trace.events[2];
  CHECK(no_results.kind == dtr::TraceEventKind::call);
  CHECK(no_results.args == std::vector<dtr::NameId>{0, 0});
  CHECK(no_results.results.empty());
  CHECK(trace.events[3].results.at(0).alias == -1);
}

// Note [Plans number constants at first read] in core/constant_placement.cpp
TEST_CASE("trace: a CONSTANT declared where it was allocated says EARLY, and round-trips",
          "[core][trace]") {
  std::istringstream in(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\",\"EARLY\":true}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"64\"}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"32\"}\n");
  dtr::Trace trace = dtr::read_trace(in, "early");
  REQUIRE(trace.events.size() == 2);
  CHECK(trace.events[0].early);
  CHECK_FALSE(trace.events[1].early);
  CHECK(dtr::has_early_constants(trace));
  std::ostringstream out;
  dtr::write_trace(trace, out);
  std::istringstream again(out.str());
  const dtr::Trace back = dtr::read_trace(again, "early again");
  REQUIRE(back.events.size() == 2);
  CHECK(back.events[0].early);
  CHECK_FALSE(back.events[1].early);
  trace.events[0].early = false;
  CHECK_FALSE(dtr::has_early_constants(trace));
  std::istringstream bad(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\",\"EARLY\":1}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"64\"}\n");
  CHECK_THROWS_WITH(dtr::read_trace(bad, "bad"), Catch::Contains("EARLY must be true or false"));
}

TEST_CASE("trace: a header-only trace has no events", "[core][trace]") {
  std::istringstream in("{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":1}\n");
  dtr::Trace trace = dtr::read_trace(in, "header-only");
  CHECK(trace.version == 1);
  CHECK(trace.events.empty());
}

TEST_CASE("trace: malformed input gives TraceError with file and line", "[core][trace]") {
  struct BadCase {
    const char* file;
    uint32_t line;
    const char* words;
  };
  const BadCase cases[] = {
      {"bad_json.log", 2, "bad JSON"},
      {"number_overflow.log", 3, "a number on this line is out of range"},
      {"not_object.log", 2, "not a JSON object"},
      {"missing_instruction.log", 2, "missing field 'INSTRUCTION'"},
      {"missing_field.log", 4, "missing field 'TIME' in CALL"},
      {"wrong_type_args.log", 4, "field 'ARGS' in CALL must be an array"},
      {"wrong_type_name.log", 2, "field 'NAME' in CONSTANT must be a string"},
      {"unknown_instruction.log", 4, "unknown INSTRUCTION 'FREE'; valid instructions: ANNOTATE"},
      {"unknown_annotation.log", 2, "unknown ANNOTATION 'FORWARD'"},
      {"empty.log", 0, "empty trace"},
      {"blank_only.log", 0, "empty trace"},
      {"call_missing_memory.log", 5, "expected a MEMORY line for 'b' of CALL on line 4"},
      {"call_alias_first.log", 5, "found ALIAS"},
      {"call_name_mismatch.log", 7, "MEMORY line names 'z' but CALL on line 4 expects 'c'"},
      {"call_eof.log", 4, "file ends inside CALL on line 4: expected a MEMORY line for 'c'"},
      {"constant_eof.log", 2, "file ends inside CONSTANT"},
      {"stray_memory.log", 4, "stray MEMORY line"},
      {"negative_size.log", 5, "field 'MEMORY' in MEMORY is negative"},
      {"nonnumeric_size.log", 3, "field 'MEMORY' in MEMORY is not a whole number (\"lots\")"},
      {"fractional_size.log", 5, "field 'MEMORY' in MEMORY has a fraction (1.5)"},
      {"negative_time.log", 4, "field 'TIME' in CALL is negative"},
      {"nonnumeric_time.log", 4, "field 'TIME' in MUTATE is not a whole number"},
      {"negative_workspace.log", 4, "field 'WORKSPACE' in CALL is negative"},
      {"alias_out_of_range.log", 8, "ALIAS index \"2\" is out of range"},
      {"alias_negative.log", 6, "ALIAS index -2 is out of range"},
      {"mutate_out_of_range.log", 4, "MUTATE index 1 is out of range"},
      {"use_before_define.log", 4, "name 'x12' used before it is defined"},
      {"copy_src_undefined.log", 2, "name 'a' used before it is defined (SRC of COPY)"},
      {"copy_from_undefined.log", 4, "name 'b' used before it is defined (DST of COPY_FROM)"},
      {"pin_undefined.log", 4, "name 'b' used before it is defined (NAME of PIN)"},
      {"defined_twice_result.log", 5, "name 'a' is defined twice (RESULT of CALL"},
      {"defined_twice_copy.log", 6, "name 'b' is defined twice (DST of COPY"},
      {"defined_twice_constant.log", 4, "first defined on line 2"},
      {"pre_start_use.log", 4, "name 'w' used before it is defined"},
      {"version_too_new.trace", 1, "trace format version 5 is newer than this build supports (4)"},
      {"step_before_v4.trace", 3,
       "ANNOTATION 'STEP' needs a DTR_TRACE header of version 4 or later (this trace's: 3)"},
      {"step_in_dtr_log.log", 2,
       "ANNOTATION 'STEP' needs a DTR_TRACE header of version 4 or later (this trace's: 0)"},
      {"version_zero.trace", 1, "trace format version 0"},
      {"header_not_first.log", 2, "DTR_TRACE header after the first line"},
  };
  for (const BadCase& bad : cases) {
    INFO("file " << bad.file);
    std::string path = trace_data(bad.file);
    bool threw = false;
    try {
      dtr::read_trace(path);
    } catch (const dtr::TraceError& error) {
      threw = true;
      std::string what = error.what();
      INFO("what(): " << what);
      CHECK(error.path() == path);
      CHECK(error.line() == bad.line);
      CHECK(what.rfind(path + ":" + std::to_string(bad.line) + ": ", 0) == 0);
      CHECK(what.find(bad.words) != std::string::npos);
      CHECK(what.find("; ") != std::string::npos);  // "problem; hint"
    }
    CHECK(threw);
  }
}

TEST_CASE("trace: an unknown instruction lists the valid ones", "[core][trace]") {
  std::istringstream in("{\"INSTRUCTION\":\"FREE\"}\n");
  try {
    dtr::read_trace(in, "inline");
    FAIL("no TraceError");
  } catch (const dtr::TraceError& error) {
    std::string what = error.what();
    for (const char* valid : {"ANNOTATE", "CALL", "MEMORY", "ALIAS", "MUTATE", "CONSTANT",
                              "COPY_FROM", "RELEASE", "PIN"}) {
      CHECK(what.find(valid) != std::string::npos);
    }
  }
}

TEST_CASE("trace: a name from before START hints at the skipped lines", "[core][trace]") {
  try {
    dtr::read_trace(trace_data("pre_start_use.log"));
    FAIL("no TraceError");
  } catch (const dtr::TraceError& error) {
    CHECK(std::string(error.what()).find("before the ANNOTATE START on line 3 are skipped") !=
          std::string::npos);
  }
}

TEST_CASE("trace: integer fields accept numbers and numeric strings", "[core][trace]") {
  auto read_size = [](const std::string& memory) {
    std::istringstream in("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"a\"}\n"
                          "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":" + memory + "}\n");
    return dtr::read_trace(in, "inline").events.at(0).results.at(0).size_bytes;
  };
  CHECK(read_size("\"0\"") == 0);
  // Note [Quantities that sum]: up to 2^50, no more.
  CHECK(read_size("\"1125899906842624\"") == 1125899906842624ull);
  CHECK(read_size("1125899906842624") == 1125899906842624ull);
  CHECK_THROWS_WITH(read_size("1125899906842625"), Catch::Contains("above the 2^50 (1 PiB)"));
  CHECK_THROWS_AS(read_size("\"18446744073709551615\""), dtr::TraceError);
  CHECK(read_size("2048.0") == 2048);
  CHECK(read_size("\"-0\"") == 0);
  CHECK_THROWS_AS(read_size("\"18446744073709551616\""), dtr::TraceError);  // too large
  CHECK_THROWS_AS(read_size("\"\""), dtr::TraceError);
  CHECK_THROWS_AS(read_size("\" 12\""), dtr::TraceError);
  CHECK_THROWS_AS(read_size("\"1.5\""), dtr::TraceError);
  CHECK_THROWS_AS(read_size("\"0x10\""), dtr::TraceError);
  CHECK_THROWS_AS(read_size("-1"), dtr::TraceError);
  CHECK_THROWS_AS(read_size("1e30"), dtr::TraceError);
  CHECK_THROWS_AS(read_size("true"), dtr::TraceError);
  CHECK_THROWS_AS(read_size("null"), dtr::TraceError);
}

TEST_CASE("trace: write then read gives back the hand-written trace", "[core][trace]") {
  const dtr::Trace& trace = good_trace();
  dtr::Trace again = round_trip(trace);
  require_same_trace(trace, again);
  CHECK(again.version == dtr::kTraceFormatVersion);
  CHECK(again.ignored_releases == 0);  // the writer drops what the reader dropped

  // Our format starts with the header; then DTR's lines (CALL, MEMORY, ALIAS, ...).
  std::stringstream buffer;
  dtr::write_trace(trace, buffer);
  std::string first_line, second_line;
  std::getline(buffer, first_line);
  std::getline(buffer, second_line);
  CHECK(first_line == "{\"INSTRUCTION\":\"DTR_TRACE\",\"SOURCE\":\"good.log\",\"VERSION\":4}");
  CHECK(second_line == "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}");
  CHECK(buffer.str().find("{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"4096\",\"NAME\":\"yv\"}\n"
                          "{\"ALIAS\":0,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"yv\"}\n") !=
        std::string::npos);

  // Writing what was read back gives the same bytes, but for SOURCE.
  std::stringstream twice;
  again.path.clear();
  dtr::write_trace(again, twice);
  std::string first = buffer.str();
  CHECK(twice.str().substr(twice.str().find('\n')) == first.substr(first.find('\n')));
}

TEST_CASE("trace: write_trace to a file and back", "[core][trace]") {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("dtr-test-trace-" + std::to_string(getpid()) + ".trace"))
                         .string();
  dtr::write_trace(good_trace(), path);
  dtr::Trace again = dtr::read_trace(path);
  std::remove(path.c_str());
  CHECK(again.path == path);
  CHECK(again.events.at(0).line == 2);
  require_same_trace(good_trace(), again);

  CHECK_THROWS_AS(dtr::write_trace(good_trace(), "/nonexistent-dir/x.trace"), dtr::TraceError);
  CHECK_THROWS_AS(dtr::read_trace("/nonexistent-dir/x.trace"), dtr::TraceError);
}

TEST_CASE("trace: a trace built in memory round-trips", "[core][trace]") {
  dtr::Trace trace;
  dtr::TraceEvent constant;
  constant.kind = dtr::TraceEventKind::constant;
  constant.results.push_back({trace.intern("p"), 16, -1});
  dtr::TraceEvent call;
  call.kind = dtr::TraceEventKind::call;
  call.op = "view";
  call.args = {trace.intern("p")};
  call.results.push_back({trace.intern("v"), 16, 0});
  call.time_ns = 3;
  dtr::TraceEvent mask = call;  // Note [Remat cost]: a cheaper way back than running it
  mask.op = "aten::bernoulli_";
  mask.args = {};
  mask.results = {{trace.intern("m"), 64, -1}};
  mask.time_ns = 600;
  mask.remat_time_ns = 90;
  dtr::TraceEvent conv = call;  // Note [Op workspace]: scratch held while it ran
  conv.op = "aten::convolution";
  conv.results = {{trace.intern("y"), 256, -1}};
  conv.workspace_bytes = 4096;
  trace.events = {constant, call, mask, conv};
  dtr::Trace again = round_trip(trace);
  require_same_trace(trace, again);
  CHECK(again.events[1].remat_time_ns == dtr::TraceEvent::kSameTime);
  CHECK(again.events[2].remat_time_ns == 90);
  CHECK(again.events[2].workspace_bytes == 0);
  CHECK(again.events[3].workspace_bytes == 4096);

  dtr::TraceEvent bad;
  bad.kind = dtr::TraceEventKind::release;
  bad.dst = 99;
  trace.events.push_back(bad);
  std::stringstream sink;
  CHECK_THROWS_AS(dtr::write_trace(trace, sink), dtr::TraceError);
}

namespace {

struct RealLog {
  const char* prefix;
  size_t events;
  size_t calls;
  size_t mutates;
  size_t constants;
  size_t names;
};

// Counted with grep -c on each INSTRUCTION (each log's START is on line 1, so nothing is
// skipped; the logs release no undefined names) and a short script for the names.
constexpr RealLog kRealLogs[] = {
    {"resnet32", 2608, 286, 0, 223, 1538},
    {"transformer", 12237, 2731, 90, 333, 6480},
    {"lstm", 32386, 7798, 128, 137, 16262},
};

}  // namespace

TEST_CASE("trace: the real DTR logs parse", "[core][trace]") {
  for (const RealLog& log : kRealLogs) {
    std::string path = dtr::test::log_path(log.prefix);
    if (path.empty()) {
      WARN("SKIPPED: no " << log.prefix << "*.log in " << DTR_LOG_DIR);
      continue;
    }
    INFO(path);
    auto begin = std::chrono::steady_clock::now();
    dtr::Trace trace = dtr::read_trace(path);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    INFO("read in " << seconds << " s");
    CHECK(trace.version == 0);
    CHECK(trace.events.size() == log.events);
    CHECK(count_kind(trace, dtr::TraceEventKind::call) == log.calls);
    CHECK(count_kind(trace, dtr::TraceEventKind::mutate) == log.mutates);
    CHECK(count_kind(trace, dtr::TraceEventKind::constant) == log.constants);
    CHECK(count_kind(trace, dtr::TraceEventKind::annotate) == 2);
    CHECK(trace.names.size() == log.names);
    CHECK(trace.ignored_releases == 0);
    REQUIRE(!trace.events.empty());
    CHECK(trace.events[0].op == "START");
    CHECK(trace.events[0].line == 1);
  }
}

TEST_CASE("trace: the ResNet-32 log round-trips", "[core][trace]") {
  std::string path = dtr::test::log_path("resnet32");
  if (path.empty()) {
    WARN("SKIPPED: no resnet32*.log in " << DTR_LOG_DIR);
    return;
  }
  dtr::Trace trace = dtr::read_trace(path);
  // The first CALL, checked by hand against the log.
  const dtr::TraceEvent* first_call = nullptr;
  for (const dtr::TraceEvent& event : trace.events) {
    if (event.kind == dtr::TraceEventKind::call) {
      first_call = &event;
      break;
    }
  }
  REQUIRE(first_call != nullptr);
  CHECK(first_call->op == "cudnn_convolution");
  CHECK(names_of(trace, first_call->args) == std::vector<std::string>{"x7973", "x7691"});
  CHECK(first_call->time_ns == 733881);
  REQUIRE(first_call->results.size() == 1);
  CHECK(name_of(trace, first_call->results[0].name) == "x7977");
  CHECK(first_call->results[0].size_bytes == 179830784);
  CHECK(first_call->results[0].alias == -1);

  require_same_trace(trace, round_trip(trace));
}

TEST_CASE("trace: ANNOTATE STEP (version 4) reads and writes back", "[core][trace]") {
  // Note [Step marks] in integration/torch/dispatch_hook.cpp: the PyTorch host writes one
  // as each optimizer step returns; a replay ends an engine period there.
  std::istringstream in(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"a\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":8}\n"
      "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"STEP\"}\n");
  const dtr::Trace trace = dtr::read_trace(in, "inline");
  REQUIRE(trace.events.size() == 2);
  CHECK(trace.events[1].kind == dtr::TraceEventKind::annotate);
  CHECK(trace.events[1].op == "STEP");
  const dtr::Trace again = round_trip(trace);
  require_same_trace(trace, again);
  CHECK(again.events[1].op == "STEP");
}

TEST_CASE("trace: a name read after its RELEASE or DISCARD is an error naming both lines",
          "[core][trace]") {
  // Note [Names stay defined]: the replay trusted this order, and crashed on such traces.
  const std::string head =
      "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"a\"],\"TIME\":10}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"1024\"}\n"
      "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":-1}\n";
  auto read = [&](const std::string& tail) {
    std::istringstream in(head + tail);
    return dtr::read_trace(in, "inline");
  };
  const std::string call_g =
      "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"g\",\"ARGS\":[\"a\"],\"RESULT\":[],\"TIME\":1}\n";
  const std::string release = "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n";
  const std::string discard = "{\"INSTRUCTION\":\"DISCARD\",\"NAME\":\"a\"}\n";
  CHECK_THROWS_WITH(read(release + call_g),
                    Catch::Contains("inline:5: name 'a' is used (ARGS of CALL) after its "
                                    "RELEASE on line 4"));
  CHECK_THROWS_WITH(read(release + discard + call_g), Catch::Contains("after its RELEASE"));
  CHECK_THROWS_WITH(read(discard + call_g),
                    Catch::Contains("inline:5: name 'a' is used (ARGS of CALL) after its "
                                    "DISCARD on line 4"));
  CHECK_THROWS_WITH(read(release + "{\"INSTRUCTION\":\"COPY\",\"SRC\":\"a\",\"DST\":\"b\"}\n"),
                    Catch::Contains("(SRC of COPY) after its RELEASE"));
  CHECK_THROWS_WITH(read(release + "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"a\"}\n"),
                    Catch::Contains("(NAME of PIN) after its RELEASE"));
  // A DISCARD after the RELEASE is what a live host writes; a second RELEASE is dropped
  // and counted, as one of a name never defined.
  const dtr::Trace fine = read(call_g + release + discard + release);
  CHECK(fine.ignored_releases == 1);
  CHECK(fine.events.size() == 4);  // f, g, the first RELEASE, the DISCARD
  // An empty MUTATE list writes nothing: a CALL.
  CHECK_THROWS_WITH(read("{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"m\",\"ARGS\":[\"a\"],"
                         "\"MUTATE\":[],\"TIME\":1}\n"),
                    Catch::Contains("MUTATE's list 'MUTATE' is empty"));
}

TEST_CASE("trace: sizes or times that add up past 2^60 are refused at the line that does it",
          "[core][trace]") {
  // Note [Quantities that sum]: each TIME under 2^50, 16 384 of them wrapped the sum (a probe,
  // 2026-12-07: a baseline compute of 1.3e17 ns where it was 1.86e19).
  std::ostringstream text;
  text << R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"})"
       << "\n"
       << R"({"INSTRUCTION":"CONSTANT","NAME":"x"})"
       << "\n"
       << R"({"INSTRUCTION":"MEMORY","MEMORY":8,"NAME":"x"})"
       << "\n";
  for (int i = 0; i < 1100; ++i)
    text << R"({"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["y)" << i
         << R"("],"TIME":1125899906842624})"
         << "\n"
         << R"({"INSTRUCTION":"MEMORY","MEMORY":8,"NAME":"y)" << i << R"("})"
         << "\n"
         << R"({"ALIAS":-1,"INSTRUCTION":"ALIAS","NAME":"y)" << i << R"("})"
         << "\n";
  std::istringstream in(text.str());
  // The 1025th TIME of 2^50 brings the sum past 2^60: line 3 + 3 * 1024 + 1.
  CHECK_THROWS_WITH(dtr::read_trace(in, "sums.log"),
                    Catch::Contains("sums.log:3076: field 'TIME' in CALL brings the trace's "
                                    "nanoseconds to more than 2^60"));
}

TEST_CASE("trace: a line over kMaxTraceLineBytes is refused with its number", "[core][trace]") {
  // Note [Reading line by line]: the reader took a whole file into memory, so `--trace
  // /dev/zero` grew until the allocator aborted. A file of one line a MiB over the cap stands in for it.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("dtr-test-long-line-" + std::to_string(getpid()) + ".log"))
                               .string();
  const std::string start = "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}";
  auto error_of = [&](const std::string& text) {
    {
      std::ofstream out(path, std::ios::binary);
      out << text;
    }
    try {
      dtr::read_trace(path);
    } catch (const dtr::TraceError& e) {
      return std::make_pair(e.line(), std::string(e.what()));
    }
    return std::make_pair(uint32_t{0}, std::string("no error"));
  };
  const auto [line, what] =
      error_of(std::string(dtr::kMaxTraceLineBytes + (size_t{1} << 20), 'a') + "\n");
  CHECK(line == 1);
  CHECK(what == path +
                    ":1: line 1 is longer than 16 MiB, the most this reader takes "
                    "(kMaxTraceLineBytes); a trace has one JSON object per line, each far "
                    "shorter: is this a trace file?");
  // Counted past blank lines, and with no newline at the end.
  CHECK(error_of(start + "\n\n" + std::string(dtr::kMaxTraceLineBytes + (size_t{1} << 20), ' '))
            .first == 3);
  // A line of exactly the cap is read (here a START padded with spaces).
  const std::string padded = start + std::string(dtr::kMaxTraceLineBytes - start.size(), ' ');
  std::istringstream at_cap(padded + "\n" + padded);
  CHECK(dtr::read_trace(at_cap, "at-cap").events.size() == 2);
  std::remove(path.c_str());
}

TEST_CASE("trace: errors quote at most kMaxQuotedInputChars of a name, value or line",
          "[core][trace]") {
  // Note [Reading line by line]: a 50 MB name was echoed whole in its error.
  const std::string name(100000, 'n');
  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    try {
      dtr::read_trace(in, "inline");
    } catch (const dtr::TraceError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // (A JSON string's dump, and nlohmann's "last read", start with its quote.)
  const std::string prefix = std::string(dtr::kMaxQuotedInputChars - 1, 'n') + "...";
  const std::string cases[] = {
      "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"" + name + "\"}\n",
      "{\"INSTRUCTION\":\"" + name + "\"}\n",
      "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"" + name + "\"}\n",
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c\",\"MEMORY\":\"" +
          name + "\"}\n",
      "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"" + name,  // unterminated: nlohmann's "last read"
  };
  for (const std::string& text : cases) {
    const std::string what = error_of(text);
    INFO(what.substr(0, 300));
    CHECK(what.find(prefix) != std::string::npos);
    CHECK(what.size() < 600);
  }
  // Short ones whole, as before.
  CHECK_THAT(error_of("{\"INSTRUCTION\":\"PIN\",\"NAME\":\"short\"}\n"),
             Catch::Contains("name 'short' used before it is defined"));
}
