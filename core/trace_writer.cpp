// trace_writer.cpp: writes a Trace in our versioned format (docs/trace-format.md).
//
// The output is the header line {"INSTRUCTION":"DTR_TRACE","VERSION":kTraceFormatVersion}
// (plus "SOURCE", the name of the file the trace was read from, when known), then every event in
// DTR's own line format, so DTR's tools can read it once the header is dropped: a CALL is
// unfolded into its CALL line and a MEMORY then an ALIAS line per result, a CONSTANT into
// its CONSTANT and MEMORY lines (Note [CALL folding] in trace_reader.cpp).
// Like DTR's logs, MEMORY is written as a string of digits and keys are sorted; TIME and
// ALIAS are written as JSON numbers (the reader takes either form).
//
// The writer checks only what it needs to write a well-formed file: every NameId must be in
// range of Trace::names. It does not re-validate the trace's meaning (use before
// definition and so on); read_trace() of the output does that. Writing then reading gives
// back the same names and events, except TraceEvent::line and Trace::path.

#include "dtr/core/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <ostream>

#include <nlohmann/json.hpp>

#include "dtr/core/output_file.h"

namespace dtr {

namespace {

using nlohmann::json;

class TraceWriter {
 public:
  TraceWriter(const Trace& trace, std::ostream& out, const std::string& path_for_errors)
      : trace_(trace), out_(out), path_(path_for_errors) {}

  void write() {
    json header = {{"INSTRUCTION", "DTR_TRACE"}, {"VERSION", kTraceFormatVersion}};
    // The source's file name only, so the output does not depend on where the input lived.
    if (!trace_.path.empty()) header["SOURCE"] = trace_.path.substr(trace_.path.rfind('/') + 1);
    emit(header);
    for (size_t i = 0; i < trace_.events.size(); ++i) write_event(i, trace_.events[i]);
    out_.flush();
    if (!out_) fail("write failed; check free disk space and permissions");
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw TraceError(path_, line_, problem);
  }

  const std::string& name(size_t event_index, NameId id) const {
    if (id >= trace_.names.size()) {
      fail("event " + std::to_string(event_index) + " refers to name id " + std::to_string(id) +
           " but the trace has " + std::to_string(trace_.names.size()) +
           " names; build names with Trace::intern()");
    }
    return trace_.names[id];
  }

  json names_of(size_t event_index, const std::vector<NameId>& ids) const {
    json list = json::array();
    for (NameId id : ids) list.push_back(name(event_index, id));
    return list;
  }

  void emit(const json& line) {
    ++line_;
    try {
      out_ << line.dump() << '\n';
    } catch (const json::exception& error) {  // e.g. a name that is not valid UTF-8
      fail(std::string("cannot write event: ") + error.what());
    }
  }

  void emit_memory(const std::string& tensor, uint64_t size_bytes) {
    emit({{"INSTRUCTION", "MEMORY"}, {"NAME", tensor}, {"MEMORY", std::to_string(size_bytes)}});
  }

  void write_event(size_t index, const TraceEvent& event) {
    switch (event.kind) {
      case TraceEventKind::annotate:
        emit({{"INSTRUCTION", "ANNOTATE"}, {"ANNOTATION", event.op}});
        return;
      case TraceEventKind::call: {
        json results = json::array();
        for (const TraceResult& result : event.results) results.push_back(name(index, result.name));
        json call = {{"INSTRUCTION", "CALL"},
                     {"NAME", event.op},
                     {"ARGS", names_of(index, event.args)},
                     {"RESULT", std::move(results)},
                     {"TIME", event.time_ns}};
        if (event.remat_time_ns != TraceEvent::kSameTime) call["REMAT_TIME"] = event.remat_time_ns;
        if (event.workspace_bytes != 0) call["WORKSPACE"] = event.workspace_bytes;
        emit(std::move(call));
        for (const TraceResult& result : event.results) {
          const std::string& tensor = name(index, result.name);
          emit_memory(tensor, result.size_bytes);
          emit({{"INSTRUCTION", "ALIAS"}, {"NAME", tensor}, {"ALIAS", result.alias}});
        }
        return;
      }
      case TraceEventKind::mutate:
        emit({{"INSTRUCTION", "MUTATE"},
              {"NAME", event.op},
              {"ARGS", names_of(index, event.args)},
              {"MUTATE", event.mutated},
              {"TIME", event.time_ns}});
        return;
      case TraceEventKind::constant: {
        if (event.results.size() != 1) {
          fail("event " + std::to_string(index) + " is a constant with " +
               std::to_string(event.results.size()) + " results; a constant has exactly one");
        }
        const std::string& tensor = name(index, event.results[0].name);
        if (event.early)  // Note [Plans number constants at first read]
          emit({{"INSTRUCTION", "CONSTANT"}, {"NAME", tensor}, {"EARLY", true}});
        else
          emit({{"INSTRUCTION", "CONSTANT"}, {"NAME", tensor}});
        emit_memory(tensor, event.results[0].size_bytes);
        return;
      }
      case TraceEventKind::copy:
      case TraceEventKind::copy_from:
        emit({{"INSTRUCTION", event.kind == TraceEventKind::copy ? "COPY" : "COPY_FROM"},
              {"DST", name(index, event.dst)},
              {"SRC", name(index, event.src)}});
        return;
      case TraceEventKind::release:
        emit({{"INSTRUCTION", "RELEASE"}, {"NAME", name(index, event.dst)}});
        return;
      case TraceEventKind::pin:
        emit({{"INSTRUCTION", "PIN"}, {"NAME", name(index, event.dst)}});
        return;
      case TraceEventKind::discard:
        emit({{"INSTRUCTION", "DISCARD"}, {"NAME", name(index, event.dst)}});
        return;
      case TraceEventKind::pin_when_material:
        emit({{"INSTRUCTION", "PIN"}, {"NAME", name(index, event.dst)}, {"WHEN_MATERIAL", true}});
        return;
    }
    fail("event " + std::to_string(index) + " has an unknown kind (" +
         std::to_string(static_cast<int>(event.kind)) + ")");
  }

  const Trace& trace_;
  std::ostream& out_;
  std::string path_;
  uint32_t line_ = 0;  // output line being written, for errors
};

}  // namespace

void write_trace(const Trace& trace, std::ostream& out) {
  TraceWriter(trace, out, "<output>").write();
}

void write_trace(const Trace& trace, const std::string& path) {
  ReplacingFile file(path);  // Note [Whole or absent] in core/output_file.cpp
  if (!file) throw TraceError(path, 0, "cannot open for writing; check the directory exists");
  TraceWriter(trace, file.out(), path).write();
  if (!file.commit())
    throw TraceError(path, 0, std::string("cannot write the trace: ") + std::strerror(errno));
}

}  // namespace dtr
