// synthetic_trace.cpp: generators for synthetic traces.
#include "dtr/sim/synthetic_trace.h"

#include <random>
#include <string>

namespace dtr {

namespace {
struct Builder {
  Trace trace;
  uint32_t next_name = 0;

  NameId fresh() { return trace.intern("t" + std::to_string(next_name++)); }
  void annotate(const char* what) {
    TraceEvent ev;
    ev.kind = TraceEventKind::annotate;
    ev.op = what;
    trace.events.push_back(ev);
  }
  NameId constant(uint64_t bytes) {
    TraceEvent ev;
    ev.kind = TraceEventKind::constant;
    const NameId n = fresh();
    ev.results.push_back({n, bytes, -1});
    trace.events.push_back(ev);
    return n;
  }
  std::vector<NameId> call(const std::string& op, std::vector<NameId> args,
                           const std::vector<std::pair<uint64_t, int32_t>>& outs, uint64_t ns) {
    TraceEvent ev;
    ev.kind = TraceEventKind::call;
    ev.op = op;
    ev.args = std::move(args);
    ev.time_ns = ns;
    std::vector<NameId> names;
    for (const auto& [bytes, alias] : outs) {
      const NameId n = fresh();
      ev.results.push_back({n, bytes, alias});
      names.push_back(n);
    }
    trace.events.push_back(ev);
    return names;
  }
  void simple(TraceEventKind kind, NameId dst, NameId src = 0) {
    TraceEvent ev;
    ev.kind = kind;
    ev.dst = dst;
    ev.src = src;
    trace.events.push_back(ev);
  }
};
}  // namespace

Trace make_linear_chain_trace(uint32_t n, uint64_t unit_bytes, uint64_t unit_ns) {
  Builder b;
  b.annotate("START");
  std::vector<NameId> x(n + 1);
  x[0] = b.constant(unit_bytes);
  for (uint32_t i = 1; i <= n; ++i) x[i] = b.call("f", {x[i - 1]}, {{unit_bytes, -1}}, unit_ns)[0];
  b.annotate("BACKWARD");
  NameId g = b.call("loss_grad", {x[n]}, {{unit_bytes, -1}}, unit_ns)[0];
  b.simple(TraceEventKind::release, x[n]);
  for (uint32_t i = n; i >= 1; --i) {
    const NameId g_prev = b.call("f_backward", {g, x[i - 1]}, {{unit_bytes, -1}}, unit_ns)[0];
    b.simple(TraceEventKind::release, g);
    if (i - 1 > 0) b.simple(TraceEventKind::release, x[i - 1]);
    g = g_prev;
  }
  b.trace.path = "linear-" + std::to_string(n);
  return std::move(b.trace);
}

Trace make_random_trace(uint64_t seed, uint32_t n_events, uint64_t unit_bytes) {
  Builder b;
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  std::vector<NameId> live;  // names holding a reference
  auto pick = [&] { return live[uniform(0, live.size() - 1)]; };
  auto kill = [&](size_t i) {
    live[i] = live.back();
    live.pop_back();
  };
  b.annotate("START");
  for (int i = 0; i < 3; ++i) live.push_back(b.constant(uniform(1, 64) * unit_bytes));
  for (uint32_t e = 0; e < n_events; ++e) {
    const uint64_t dice = uniform(0, 99);
    if (live.empty() || dice < 4) {
      live.push_back(b.constant(uniform(1, 64) * unit_bytes));
    } else if (dice < 55) {
      std::vector<NameId> args;
      const uint64_t n_args = uniform(1, std::min<uint64_t>(3, live.size()));
      for (uint64_t i = 0; i < n_args; ++i) args.push_back(pick());
      std::vector<std::pair<uint64_t, int32_t>> outs;
      const uint64_t n_out = uniform(0, 9) < 8 ? 1 : uniform(2, 3);
      for (uint64_t i = 0; i < n_out; ++i) {
        if (uniform(0, 9) < 2)
          outs.push_back({0, static_cast<int32_t>(uniform(0, args.size() - 1))});  // a view
        else
          outs.push_back({uniform(1, 256) * unit_bytes, -1});
      }
      for (NameId n : b.call("op" + std::to_string(uniform(0, 20)), args, outs, uniform(1, 1000) * 1000))
        live.push_back(n);
    } else if (dice < 60) {
      TraceEvent ev;
      ev.kind = TraceEventKind::mutate;
      ev.op = "add_";
      const uint64_t n_args = uniform(1, std::min<uint64_t>(2, live.size()));
      for (uint64_t i = 0; i < n_args; ++i) ev.args.push_back(pick());
      ev.mutated.push_back(0);
      ev.time_ns = uniform(1, 100) * 1000;
      b.trace.events.push_back(ev);
    } else if (dice < 68) {
      const NameId dst = b.fresh();
      b.simple(TraceEventKind::copy, dst, pick());
      live.push_back(dst);
    } else if (dice < 70 && live.size() >= 2) {
      b.simple(TraceEventKind::copy_from, pick(), pick());
    } else {
      const size_t i = uniform(0, live.size() - 1);
      b.simple(TraceEventKind::release, live[i]);
      kill(i);
    }
  }
  b.trace.path = "random-" + std::to_string(seed);
  return std::move(b.trace);
}

Trace make_random_training_trace(uint64_t seed, uint32_t forward_ops, uint64_t unit_bytes,
                                 uint64_t unit_ns) {
  Builder b;
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  auto bytes = [&] { return uniform(1, 4) * unit_bytes; };
  auto ns = [&] { return uniform(1, 5) * unit_ns; };
  // The program first; the releases go in at the end, each right after its name's last
  // read, as autograd frees a saved value after its backward op.
  b.annotate("START");
  const NameId input = b.constant(bytes());
  std::vector<NameId> main = {input};                        // each forward op's first output
  std::vector<std::vector<NameId>> inputs(forward_ops + 1);  // what forward op i read
  std::vector<std::vector<NameId>> saved(forward_ops + 1);   // its other outputs
  for (uint32_t i = 1; i <= forward_ops; ++i) {
    inputs[i] = {main.back()};
    if (main.size() >= 3 && uniform(0, 2) == 0)
      inputs[i].push_back(main[uniform(0, main.size() - 3)]);
    std::vector<std::pair<uint64_t, int32_t>> outs = {{bytes(), -1}};
    if (uniform(0, 2) == 0) {  // a multi-output op: one or two saved outputs, as batch norm's
      outs.push_back({bytes(), -1});
      if (uniform(0, 1) == 0) outs.push_back({bytes(), -1});
    }
    const auto made = b.call("f" + std::to_string(i), inputs[i], outs, ns());
    main.push_back(made[0]);
    saved[i].assign(made.begin() + 1, made.end());
  }
  b.annotate("BACKWARD");
  NameId grad = b.call("loss_backward", {main.back()}, {{bytes(), -1}}, ns())[0];
  for (uint32_t i = forward_ops; i >= 1; --i) {
    std::vector<NameId> args = {grad};
    args.insert(args.end(), inputs[i].begin(), inputs[i].end());
    args.insert(args.end(), saved[i].begin(), saved[i].end());
    grad = b.call("f" + std::to_string(i) + "_backward", args, {{bytes(), -1}}, ns())[0];
  }
  // Releases: every name but the input and the last gradient, right after its last read
  // (or its making, if nothing reads it).
  std::vector<size_t> last(b.trace.names.size(), 0);
  for (size_t e = 0; e < b.trace.events.size(); ++e) {
    for (const TraceResult& r : b.trace.events[e].results) last[r.name] = e;
    for (NameId a : b.trace.events[e].args) last[a] = e;
  }
  std::vector<TraceEvent> events;
  for (size_t e = 0; e < b.trace.events.size(); ++e) {
    events.push_back(b.trace.events[e]);
    for (NameId n = 0; n < last.size(); ++n) {
      if (last[n] != e || n == input || n == grad) continue;
      TraceEvent ev;
      ev.kind = TraceEventKind::release;
      ev.dst = n;
      events.push_back(ev);
    }
  }
  b.trace.events = std::move(events);
  b.trace.path = "random-training-" + std::to_string(seed);
  return std::move(b.trace);
}

void add_random_workspaces(Trace& trace, uint64_t seed, uint64_t unit_bytes) {
  std::mt19937_64 rng(seed);
  for (TraceEvent& ev : trace.events) {
    if (ev.kind != TraceEventKind::call || rng() % 3 != 0) continue;
    ev.workspace_bytes = (1 + rng() % 256) * unit_bytes;
  }
}

}  // namespace dtr
