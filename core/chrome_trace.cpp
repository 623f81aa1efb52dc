// chrome_trace.cpp: Timeline <-> Chrome trace JSON (include/dtr/core/chrome_trace.h).
//
// One generator makes the events in order (metadata, then a four-way merge of the records
// sorted by time), and both writers consume it: to_chrome_trace collects the events in a
// JSON array, write_chrome_trace dumps each one as it comes, so writing a timeline of a
// million records never holds a million JSON objects (Note [Streaming the trace]).
//
// Note [Streaming the trace]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An nlohmann JSON object costs some hundreds of bytes; a capped timeline holds up to a
// million records (Note [Timeline cap]). The writer therefore sorts only indices (4 bytes
// per record), builds one event at a time and writes it with a separator. The document
// is the same as to_chrome_trace's, key for key, so tests of one hold for the other.
#include "dtr/core/chrome_trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "dtr/core/output_file.h"

namespace dtr {

namespace {

using ojson = nlohmann::ordered_json;

constexpr int kPid = 1;
constexpr int kOpsTid = 1;
constexpr int kRematTid = 2;
constexpr int kEvictionTid = 3;

double to_us(uint64_t ns, uint64_t origin_ns) { return double(ns - origin_ns) / 1000.0; }

ojson other_data(const Timeline& t, const ChromeTraceInfo& info) {
  size_t remats = 0;
  for (const TimelineSpan& s : t.spans()) remats += s.remat ? 1 : 0;
  ojson d;
  d["format"] = "dtr-timeline";
  d["version"] = kChromeTraceVersion;
  d["host"] = info.host;
  d["clock"] = info.clock;
  d["origin_ns"] = t.origin_ns();
  if (const auto b = t.last_budget())
    d["budget_bytes"] = *b;
  else
    d["budget_bytes"] = nullptr;
  d["ops"] = t.spans().size() - remats;
  d["remats"] = remats;
  d["evictions"] = t.evictions().size();
  d["compactions"] = t.compactions().size();
  d["samples"] = t.allocated_samples().size();
  d["max_records"] = t.max_records();
  d["truncated"] = t.truncated();
  d["dropped_records"] = t.dropped_records();
  for (const auto& [key, value] : info.extra.items()) d[key] = value;
  return d;
}

ojson metadata(const char* what, int tid, const std::string& name) {
  ojson e{{"name", what}, {"ph", "M"}, {"pid", kPid}};
  if (tid > 0) e["tid"] = tid;
  e["args"] = ojson{{"name", name}};
  return e;
}

ojson counter(const char* name, uint64_t ts_ns, uint64_t origin, uint64_t bytes) {
  return ojson{{"name", name}, {"cat", "memory"},
               {"ph", "C"},    {"ts", to_us(ts_ns, origin)},
               {"pid", kPid},  {"args", ojson{{"bytes", bytes}}}};
}

template <class T, class Key>
std::vector<uint32_t> order_by(const std::vector<T>& v, Key key) {
  std::vector<uint32_t> idx(v.size());
  for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](uint32_t a, uint32_t b) { return key(v[a]) < key(v[b]); });
  return idx;
}

// Calls `emit` with every event of the document, in document order.
void generate(const Timeline& t, const ChromeTraceInfo& info,
              const std::function<void(const ojson&)>& emit) {
  emit(metadata("process_name", 0, info.process_name));
  emit(metadata("thread_name", kOpsTid, "ops"));
  emit(metadata("thread_name", kRematTid, "remat"));
  emit(metadata("thread_name", kEvictionTid, "evictions"));

  const uint64_t origin = t.origin_ns();
  const auto& budgets = t.budget_samples();
  const auto& evictions = t.evictions();
  const auto& spans = t.spans();
  const auto& samples = t.allocated_samples();
  const auto& compactions = t.compactions();
  const auto b_idx = order_by(budgets, [](const TimelineBudget& b) { return b.ts_ns; });
  const auto e_idx = order_by(evictions, [](const TimelineEviction& e) { return e.ts_ns; });
  const auto s_idx = order_by(spans, [](const TimelineSpan& s) { return s.start_ns; });
  const auto a_idx = order_by(samples, [](const TimelineSample& s) { return s.ts_ns; });
  const auto c_idx = order_by(compactions, [](const TimelineCompaction& c) { return c.ts_ns; });
  size_t bi = 0, ei = 0, si = 0, ai = 0, ci = 0;
  constexpr uint64_t kDone = UINT64_MAX;
  uint64_t last_ts = origin;
  for (;;) {
    const uint64_t tb = bi < b_idx.size() ? budgets[b_idx[bi]].ts_ns : kDone;
    const uint64_t te = ei < e_idx.size() ? evictions[e_idx[ei]].ts_ns : kDone;
    const uint64_t ts = si < s_idx.size() ? spans[s_idx[si]].start_ns : kDone;
    const uint64_t ta = ai < a_idx.size() ? samples[a_idx[ai]].ts_ns : kDone;
    const uint64_t tc = ci < c_idx.size() ? compactions[c_idx[ci]].ts_ns : kDone;
    const uint64_t now = std::min({tb, te, ts, ta, tc});
    if (now == kDone) break;
    last_ts = now;
    if (tb == now) {
      const TimelineBudget& b = budgets[b_idx[bi++]];
      // An unlimited stretch has no value to draw; the track resumes at the next limit.
      if (b.bytes) emit(counter("budget", b.ts_ns, origin, *b.bytes));
    } else if (te == now) {
      const TimelineEviction& e = evictions[e_idx[ei++]];
      ojson args{{"bytes", e.bytes}};
      if (e.storage != UINT32_MAX) args["storage"] = e.storage;
      if (e.op != UINT32_MAX) args["op"] = e.op;
      emit(ojson{{"name", "evict"},
                 {"cat", "eviction"},
                 {"ph", "i"},
                 {"s", "t"},
                 {"ts", to_us(e.ts_ns, origin)},
                 {"pid", kPid},
                 {"tid", kEvictionTid},
                 {"args", std::move(args)}});
    } else if (tc == now) {
      const TimelineCompaction& c = compactions[c_idx[ci++]];
      emit(ojson{{"name", "compact"},
                 {"cat", "compaction"},
                 {"ph", "i"},
                 {"s", "t"},
                 {"ts", to_us(c.ts_ns, origin)},
                 {"pid", kPid},
                 {"tid", kEvictionTid},
                 {"args", ojson{{"blocks", c.blocks},
                                {"moved_bytes", c.moved_bytes},
                                {"released_bytes", c.released_bytes}}}});
    } else if (ts == now) {
      const TimelineSpan& s = spans[s_idx[si++]];
      ojson args = ojson::object();
      if (s.op != UINT32_MAX) args["op"] = s.op;
      emit(ojson{{"name", t.name(s.name)},
                 {"cat", s.remat ? "remat" : "op"},
                 {"ph", "X"},
                 {"ts", to_us(s.start_ns, origin)},
                 {"dur", double(s.dur_ns) / 1000.0},
                 {"pid", kPid},
                 {"tid", s.remat ? kRematTid : kOpsTid},
                 {"args", std::move(args)}});
    } else {
      const TimelineSample& a = samples[a_idx[ai++]];
      emit(counter("allocated", a.ts_ns, origin, a.bytes));
    }
  }
  if (t.truncated())  // Note [Timeline cap]
    emit(ojson{{"name", "timeline truncated"},
               {"cat", "dtr"},
               {"ph", "i"},
               {"s", "g"},
               {"ts", to_us(last_ts, origin)},
               {"pid", kPid},
               {"tid", kEvictionTid},
               {"args", ojson{{"dropped_records", t.dropped_records()}}}});
}

std::runtime_error bad(const std::string& where, const std::string& what) {
  return std::runtime_error("dtr: timeline '" + where + "': " + what);
}

uint64_t ns_of(const nlohmann::json& e, const char* key, uint64_t origin,
               const std::string& where) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_number() || it->get<double>() < 0)
    throw bad(where, std::string("an event has no numeric `") + key + "`: " + e.dump());
  return origin + static_cast<uint64_t>(std::llround(it->get<double>() * 1000.0));
}

uint64_t arg_u64(const nlohmann::json& e, const char* key, const std::string& where) {
  const auto args = e.find("args");
  if (args == e.end() || !args->is_object() || !args->contains(key) ||
      !(*args)[key].is_number_unsigned())
    throw bad(where, std::string("an event has no numeric args.") + key + ": " + e.dump());
  return (*args)[key].get<uint64_t>();
}

// args[key] if it is a 32-bit id, else "unknown" (UINT32_MAX).
uint32_t optional_id(const nlohmann::json& e, const char* key) {
  const auto args = e.find("args");
  if (args == e.end() || !args->is_object()) return UINT32_MAX;
  const auto v = args->find(key);
  if (v == args->end() || !v->is_number_unsigned() || v->get<uint64_t>() >= UINT32_MAX)
    return UINT32_MAX;
  return v->get<uint32_t>();
}

}  // namespace

ojson to_chrome_trace(const Timeline& timeline, const ChromeTraceInfo& info) {
  ojson doc;
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = other_data(timeline, info);
  ojson events = ojson::array();
  generate(timeline, info, [&](const ojson& e) { events.push_back(e); });
  doc["traceEvents"] = std::move(events);
  return doc;
}

void write_chrome_trace(const std::string& path, const Timeline& timeline,
                        const ChromeTraceInfo& info) {
  ReplacingFile file(path);  // Note [Whole or absent] in core/output_file.cpp
  if (!file)
    throw OutputError("dtr: cannot write timeline '" + path + "': " + std::strerror(errno));
  std::ofstream& out = file.out();
  // Note [Streaming the trace]: the same keys as to_chrome_trace, one event per line.
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":" << other_data(timeline, info).dump()
      << ",\"traceEvents\":[\n";
  bool first = true;
  generate(timeline, info, [&](const ojson& e) {
    if (!first) out << ",\n";
    first = false;
    out << e.dump();
  });
  out << "\n]}\n";
  if (!file.commit())  // Note [Output files]: OutputError, which the tools report with status 2
    throw OutputError("dtr: cannot write timeline '" + path +
                      "': write failed; check free disk space and permissions");
}

Timeline parse_chrome_trace(const nlohmann::json& doc, const std::string& where) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw bad(where, "not a Chrome trace (no traceEvents array)");
  uint64_t origin = 0;
  Timeline t(std::numeric_limits<size_t>::max());
  if (doc.contains("otherData") && doc["otherData"].is_object()) {
    const auto& d = doc["otherData"];
    if (d.contains("origin_ns") && d["origin_ns"].is_number_unsigned())
      origin = d["origin_ns"].get<uint64_t>();
    if (d.contains("dropped_records") && d["dropped_records"].is_number_unsigned())
      t.add_dropped(d["dropped_records"].get<uint64_t>());
  }
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (!e.is_object()) throw bad(where, "an event is not an object: " + e.dump());
    const std::string ph = e.value("ph", "");
    const std::string name = e.value("name", "");
    const std::string cat = e.value("cat", "");
    if (ph == "X" && (cat == "op" || cat == "remat")) {
      const uint64_t start = ns_of(e, "ts", origin, where);
      const uint64_t dur = ns_of(e, "dur", 0, where);
      t.span(name, start, dur, cat == "remat", optional_id(e, "op"));
    } else if (ph == "i" && cat == "eviction") {
      t.eviction(ns_of(e, "ts", origin, where), arg_u64(e, "bytes", where),
                 optional_id(e, "storage"), optional_id(e, "op"));
    } else if (ph == "i" && cat == "compaction") {
      t.compaction(ns_of(e, "ts", origin, where), arg_u64(e, "blocks", where),
                   arg_u64(e, "moved_bytes", where), arg_u64(e, "released_bytes", where));
    } else if (ph == "C" && name == "allocated") {
      t.allocated(ns_of(e, "ts", origin, where), arg_u64(e, "bytes", where));
    } else if (ph == "C" && name == "budget") {
      t.budget(ns_of(e, "ts", origin, where), arg_u64(e, "bytes", where));
    }
  }
  return t;
}

Timeline load_chrome_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("dtr: cannot read timeline '" + path + "': " + std::strerror(errno));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw bad(path, std::string("not JSON: ") + e.what());
  }
  return parse_chrome_trace(doc, path);
}

}  // namespace dtr
