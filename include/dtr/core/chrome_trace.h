// chrome_trace.h: a Timeline as Chrome trace JSON (Perfetto, chrome://tracing), and back.
//
// The format (docs/observability.md) is Chrome's Trace Event Format, JSON Object
// form: {"displayTimeUnit": "ms", "otherData": {...}, "traceEvents": [...]}. Times are
// microseconds (`ts`, `dur`, as the format requires) since the timeline's origin (its
// earliest record; `otherData.origin_ns` holds the origin on the host's clock). Every event
// has pid 1; the tracks:
//
//   ph  name                 cat       tid  args
//   M   process_name         -         -    {name: ChromeTraceInfo::process_name}
//   M   thread_name          -         1-3  {name: "ops" | "remat" | "evictions"}
//   X   op name              op        1    {op: OpId}            an op that ran
//   X   op name              remat     2    {op: OpId}            an op re-run (remat)
//   i   "evict"              eviction  3    {bytes, storage}      s: "t" (thread)
//   i   "timeline truncated" dtr       3    {dropped_records}     s: "g"; Note [Timeline cap]
//   C   "allocated"          memory    -    {bytes: N}            live bytes from ts on
//   C   "budget"             memory    -    {bytes: N}            the budget from ts on
//
// Metadata events come first, then every other event in time order (ties: budget,
// eviction, op/remat, allocated), so each counter is monotone in time. `otherData` holds
// {format: "dtr-timeline", version: kChromeTraceVersion, host, clock, origin_ns,
// budget_bytes (null: unlimited), ops, remats, evictions, samples, max_records, truncated,
// dropped_records}, then ChromeTraceInfo::extra's keys.
//
// Reading takes back what writing wrote: load(write(t)) has t's spans, evictions, samples,
// limited budgets (an unlimited stretch is not written), names and dropped count, with
// timestamps exact to the nanosecond; events of other kinds (from another tool) are
// ignored. Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dtr/core/timeline.h"

namespace dtr {

constexpr uint32_t kChromeTraceVersion = 1;

struct ChromeTraceInfo {
  std::string process_name = "dtr";  // the process track's title in Perfetto
  std::string host;                  // otherData.host: "dtr-sim", "torch", ...
  std::string clock = "logical";     // "logical" (simulated compute ns) or "steady"
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more otherData keys
};

// The whole document in memory (tests, small timelines). write_chrome_trace streams the
// same document without building it.
nlohmann::ordered_json to_chrome_trace(const Timeline& timeline, const ChromeTraceInfo& info = {});

// Throws std::runtime_error naming `path` when the file cannot be opened or written.
void write_chrome_trace(const std::string& path, const Timeline& timeline,
                        const ChromeTraceInfo& info = {});

// The timeline a document describes (see above); throws std::runtime_error naming `where`
// when it is not a JSON object with a `traceEvents` array, or an event we wrote lacks a
// field. The result keeps every record (no cap).
Timeline parse_chrome_trace(const nlohmann::json& doc, const std::string& where);
// parse_chrome_trace of a file; throws std::runtime_error naming `path` if it cannot be
// read or is not JSON.
Timeline load_chrome_trace(const std::string& path);

}  // namespace dtr
