// test_dtr_sim_cli.cpp: the dtr-sim tool as a user meets it: help, JSON, bad input.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dtr/core/trace.h"
#include "test_support.h"

using dtr::test::run_command;
using dtr::test::test_data;

namespace {
std::string sim() { return DTR_SIM_BIN; }
}  // namespace

TEST_CASE("every dtr-sim command has --help", "[sim][cli]") {
  for (const char* cmd : {"", " run", " sweep", " bound", " convert", " policies", " options"}) {
    const auto r = run_command(sim() + cmd + " --help");
    INFO(cmd << ": " << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("Usage") != std::string::npos);
  }
}

TEST_CASE("dtr-sim run --json prints the documented fields", "[sim][cli]") {
  const auto r = run_command(sim() + " run --trace " + test_data("golden/small.log") +
                             " --policy dtr_eq --budget 1400 --allocator none --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  for (const char* key : {"trace", "policy", "budget_ratio", "budget_bytes", "baseline_peak_bytes",
                          "peak_bytes", "baseline_compute_ns", "compute_ns", "overhead", "evictions",
                          "remats", "status"})
    CHECK(j.contains(key));
  CHECK(j["status"] == "ok");
  CHECK(j["peak_bytes"] == 1400);
  CHECK(j["remats"] == 6);
  CHECK(j["baseline_peak_bytes"] == 1900);
}

TEST_CASE("dtr-sim reports oom and thrash as statuses", "[sim][cli]") {
  auto status = [](const std::string& args) {
    const auto r = run_command(sim() + " run --trace " + test_data("golden/small.log") + args +
                               " --allocator none --json");
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.output)["status"].get<std::string>();
  };
  CHECK(status(" --budget 900") == "oom");
  CHECK(status(" --budget 1400 --max-overhead 1.2") == "thrash");
  CHECK(status(" --budget 1400 --max-overhead 0") == "ok");
}

TEST_CASE("dtr-sim: bad output paths and empty lists exit 2 before any work", "[sim][cli]") {
  // Note [Output files]; the helper's probe of 2026-12-07 found each of these.
  const std::string small = " --trace " + test_data("golden/small.log");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" sweep" + small + " --budgets 0.5 --quiet --csv /tmp",
       "cannot write CSV '/tmp': it is a directory"},
      {" sweep" + small + " --budgets 0.5 --quiet --csv /dev/full",
       "cannot write CSV '/dev/full': No space left on device"},
      {" run" + small + " --budget 0.5 --timeline /no/such/dir/t.json",
       "the directory '/no/such/dir' does not exist"},
      {" run" + small + " --budget 0.5 --svg /tmp", "cannot write memory picture '/tmp'"},
      {" sweep" + small + " --policies \"\" --quiet", "--policies names no policy"},
      {" bound" + small + " --budget ,", "--budget names no budget"},
      {" run --trace /tmp --budget 0.5", "/tmp:0: is a directory; give a trace file"},
      {" run" + small + " --budget 0.5 --plan /tmp", "/tmp: is a directory; give a plan file"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(sim() + c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  // The environment's timeline path too.
  const auto env = run_command("DTR_TIMELINE=/tmp " + sim() + " run" + small + " --budget 0.5");
  CHECK(env.exit_code == 2);
  CHECK(env.output.find("cannot write timeline '/tmp': it is a directory") != std::string::npos);
}

TEST_CASE("dtr-sim: outputs on inputs, huge ranges, full disks exit 2 and lose nothing",
          "[sim][cli]") {
  // A probe of 2026-12-07 (Note [Outputs that are inputs], Note [Output files]).
  const std::string dir = "/tmp/dtr-sim-cli-inputs";
  run_command("rm -rf " + dir + " && mkdir -p " + dir + "/a " + dir + "/b");
  const std::string in = dir + "/in.log";
  run_command("cp " + test_data("golden/small.log") + " " + in);
  const auto before = run_command("cat " + in).output;
  struct Case {
    std::string command, message;
  };
  const std::vector<Case> cases = {
      {sim() + " run --trace " + in + " --budget 0.5 --timeline " + in,
       "it is the trace this command reads"},
      {sim() + " run --trace " + in + " --budget 0.5 --svg " + dir + "/../" + dir.substr(5) +
           "/in.log",
       "cannot write memory picture"},
      {"DTR_SNAPSHOT=" + in + " " + sim() + " run --trace " + in + " --budget 0.5",
       "cannot write snapshot"},
      {sim() + " convert --trace " + in + " --out " + in, "it is the trace this command reads"},
      {sim() + " sweep --trace " + in + " --budgets 0.5 --quiet --csv " + dir + "/f --svg " + dir +
           "/f",
       "the CSV is written there too"},
      {sim() + " sweep --trace " + in + " --quiet --budgets 0.1:0.9:0.0000001",
       "makes 8000001 budgets, more than 10000; give a larger STEP"},
      {sim() + " sweep --trace " + in + " --quiet --budgets 0.1:0.9:1e-300",
       "makes about 1e299 budgets"},
      {sim() + " sweep --trace " + in + " --quiet --budgets nan:0.9:0.1",
       "START, STOP and STEP are finite numbers"},
      {sim() + " run --trace " + in + " --budget 0.5 --timeline /dev/full",
       "cannot write timeline '/dev/full': write failed"},
      // In braces: run_command's own 2>&1 then takes the message, not /dev/full.
      {"{ " + sim() + " run --trace " + in + " --budget 0.5 --json > /dev/full; }",
       "dtr-sim: cannot write standard output"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(c.command);
    INFO(c.command << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  CHECK(run_command("cat " + in).output == before);
  // Two traces with one base name are told apart by their paths, not merged.
  run_command("cp " + in + " " + dir + "/a/m.log && cp " + test_data("golden/small.log") + " " +
              dir + "/b/m.log");
  const auto sweep = run_command(sim() + " sweep --trace " + dir + "/a/m.log " + dir +
                                 "/b/m.log --policies dtr_eq --budgets 0.5 --allocator none " +
                                 "--csv " + dir + "/out.csv");
  REQUIRE(sweep.exit_code == 0);
  const auto csv = run_command("cat " + dir + "/out.csv").output;
  CHECK(csv.find("\n" + dir + "/a/m.log,dtr_eq,") != std::string::npos);
  CHECK(csv.find("\n" + dir + "/b/m.log,dtr_eq,") != std::string::npos);
  run_command("rm -rf " + dir);
}

TEST_CASE("dtr-sim policies lists every policy with one line each", "[sim][cli]") {
  const auto r = run_command(sim() + " policies");
  REQUIRE(r.exit_code == 0);
  const std::string listing = "\n" + r.output;
  for (const char* name :
       {"dtr_eq", "dtr", "dtr_local", "dtr_ancestors", "msps", "lru", "size", "random"})
    CHECK(listing.find(std::string("\n") + name + " ") != std::string::npos);
}

TEST_CASE("malformed traces exit with code 2 and name the file and line", "[sim][cli]") {
  DIR* dir = opendir(test_data("traces").c_str());
  REQUIRE(dir != nullptr);
  int checked = 0;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name[0] == '.' || name.rfind("good", 0) == 0 || name == "no_start.log") continue;
    const auto r = run_command(sim() + " run --trace " + test_data("traces/" + name) + " --budget 0.5");
    INFO(name << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(name + ":") != std::string::npos);  // FILE:LINE: problem
    CHECK(r.output.find("internal check failed") == std::string::npos);
    ++checked;
  }
  closedir(dir);
  CHECK(checked >= 30);
}

TEST_CASE("bad options exit with code 2 and list what is valid", "[sim][cli]") {
  const std::string trace = test_data("golden/small.log");
  struct Case {
    std::string args, env, expect;
  };
  const Case cases[] = {
      {" run --trace " + trace + " --policy nope", "", "valid policies: dtr_eq"},
      {" run --trace " + trace + " --budget -3", "", "budget"},
      {" run --trace " + trace + " --budget 1.5", "", "1.5G"},
      {" run --trace " + trace + " --search deep", "", "full, sample"},
      {" run --trace " + trace, "DTR_CONF=budgt:3 ", "valid keys: budget"},
      {" run --trace /nonexistent/x.log", "", "/nonexistent/x.log"},
      {" sweep --trace " + trace + " --budgets 0:2", "", "START:STOP:STEP"},
      {" sweep --trace " + trace + " --budgets 0.1:0.9:0.1 --policies dtr,nope", "", "nope"},
      {" run --trace " + trace + " --bogus-flag", "", "bogus"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(c.env + sim() + c.args);
    INFO(c.args << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("dtr-sim sweep writes a CSV and an SVG", "[sim][cli]") {
  const std::string dir = "/tmp/dtr-sim-cli-test";
  run_command("rm -rf " + dir + " && mkdir -p " + dir);
  const auto r = run_command(sim() + " sweep --trace " + test_data("golden/small.log") +
                             " --policies dtr_eq,lru --budgets 0.6,0.8,1.0 --csv " + dir +
                             "/out.csv --svg " + dir + "/out.svg");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string csv = dtr::test::read_file(dir + "/out.csv");
  const auto lines = std::count(csv.begin(), csv.end(), '\n');
  CHECK(lines == 7);  // header + 2 policies x 3 budgets
  const std::string svg = dtr::test::read_file(dir + "/out.svg");
  CHECK(svg.find("data-label=\"dtr_eq\"") != std::string::npos);
  CHECK(svg.find("data-label=\"lru\"") != std::string::npos);
}

TEST_CASE("dtr-sim convert writes a versioned trace that replays identically", "[sim][cli]") {
  const std::string out = "/tmp/dtr-sim-cli-convert.trace";
  const auto c = run_command(sim() + " convert --trace " + test_data("golden/small.log") + " --out " + out);
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(dtr::test::read_file(out).rfind("{\"INSTRUCTION\":\"DTR_TRACE\"", 0) == 0);
  auto json_of = [&](const std::string& trace) {
    const auto r = run_command(sim() + " run --trace " + trace + " --budget 1400 --json");
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.output);
    return std::make_tuple(j["compute_ns"], j["peak_bytes"], j["evictions"], j["status"]);
  };
  CHECK(json_of(out) == json_of(test_data("golden/small.log")));
}

TEST_CASE("dtr-sim run uses the fake allocator by default and reports its memory", "[sim][cli][allocator]") {
  const std::string log = dtr::test::log_path("resnet32");
  if (log.empty()) {
    WARN("skipped: the ResNet-32 DTR log is not in " << DTR_LOG_DIR);
    return;
  }
  for (const char* policy : {"dtr_eq", "coop"}) {
    const auto r = run_command(sim() + " run --trace " + log + " --policy " + policy +
                               " --budget 0.4 --json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.output);
    INFO(policy << ": " << r.output);
    CHECK(j["allocator"] == "fake");
    CHECK(j["status"] == "ok");
    CHECK(j["peak_reserved_bytes"].get<uint64_t>() > 0);
    CHECK(j["peak_reserved_bytes"].get<uint64_t>() <= j["budget_bytes"].get<uint64_t>());
    CHECK(j["peak_allocated_bytes"].get<uint64_t>() <= j["budget_bytes"].get<uint64_t>());
    CHECK(j["evictions"].get<uint64_t>() > 0);
    CHECK(j["fragmentation"].get<double>() >= 0.0);
    CHECK(j["fragmentation"].get<double>() <= 1.0);
    CHECK(j.contains("contiguous_failures"));
    CHECK(j["allocator_stats"].contains("reserved_bytes.all.peak"));
  }
  const auto text = run_command(sim() + " run --trace " + log + " --budget 0.4");
  CHECK(text.output.find("peak reserved") != std::string::npos);
}

TEST_CASE("dtr-sim refuses coop without the allocator and an unknown allocator", "[sim][cli][allocator]") {
  auto r = run_command(sim() + " run --trace " + test_data("golden/small.log") +
                       " --policy coop --allocator none");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--allocator host or fake") != std::string::npos);
  r = run_command(sim() + " run --trace " + test_data("golden/small.log") + " --allocator bogus");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("expected one of fake, host, none") != std::string::npos);
  // The host's model gives coop its addresses too, and says so (Note [Host device]).
  r = run_command(sim() + " run --trace " + test_data("golden/small.log") +
                  " --policy coop --allocator host --budget 0.6");
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("allocator host: peak allocated") != std::string::npos);
  CHECK(r.output.find("reserved limit") == std::string::npos);
}

TEST_CASE("dtr-sim run --reserved-limit sizes the fake device", "[sim][cli][allocator]") {
  // The moves themselves: test_replay.cpp ("reserved_limit sizes the fake device").
  const std::string trace = test_data("golden/small.log");
  auto r =
      run_command(sim() + " run --trace " + trace + " --budget 4000 --reserved-limit 4M --json");
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j["reserved_limit_bytes"] == 4 << 20);
  CHECK(j["allocator_stats"].contains("dtr.num_block_moves"));
  r = run_command(sim() + " run --trace " + trace + " --budget 4000 --reserved-limit 4M");
  CHECK(r.output.find("reserved limit 4.00 MiB: 0 blocks moved") != std::string::npos);
  r = run_command(sim() + " run --trace " + trace + " --reserved-limit 4M --allocator none");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("use allocator host or fake") != std::string::npos);
  // sweep takes it too, and its CSV says the limit and the moves.
  const std::string csv_path = "/tmp/dtr-sim-cli-reserved.csv";
  r = run_command(sim() + " sweep --trace " + trace +
                  " --policies dtr_eq --budgets 0.9,1.0 --reserved-limit 4M --csv " + csv_path);
  REQUIRE(r.exit_code == 0);
  const std::string csv = dtr::test::read_file(csv_path);
  CHECK(csv.find(",reserved_limit_bytes,block_moves,moved_bytes\n") != std::string::npos);
  CHECK(csv.find(",4194304,0,0\n") != std::string::npos);
  run_command("rm -f " + csv_path);
}

TEST_CASE("dtr-sim bound prints the least recomputation per budget", "[sim][cli][bound]") {
  const std::string trace = test_data("golden/small.log");
  const auto text = run_command(sim() + " bound --trace " + trace + " --budget 1400,0.5,900");
  INFO(text.output);
  REQUIRE(text.exit_code == 0);
  CHECK(text.output.find("any schedule recomputes at least") != std::string::npos);
  CHECK(text.output.find("no schedule fits") != std::string::npos);  // 900 B: too small
  const auto j = run_command(sim() + " bound --trace " + trace + " --budget 1400 --json");
  REQUIRE(j.exit_code == 0);
  const auto b = nlohmann::json::parse(j.output);
  for (const char* key :
       {"trace", "budget", "budget_bytes", "baseline_peak_bytes", "baseline_compute_ns", "feasible",
        "remat_ns", "overhead", "points", "points_dead_args_unpriced"})
    CHECK(b.contains(key));
  for (const auto& p : b["points"]) CHECK(p.contains("dead_args_unpriced"));
  // --lp-rounds 0: the knapsack alone, never above the default (which prices dead args).
  const auto k =
      run_command(sim() + " bound --trace " + trace + " --budget 1400 --json --lp-rounds 0");
  REQUIRE(k.exit_code == 0);
  CHECK(nlohmann::json::parse(k.output)["remat_ns"].get<uint64_t>() <=
        b["remat_ns"].get<uint64_t>());
  CHECK(b["feasible"] == true);
  CHECK(b["budget_bytes"] == 1400);
  // No policy recomputes less (dtr_eq recomputes 6 storages here: `run --json` above).
  const auto r = run_command(sim() + " run --trace " + trace +
                             " --policy dtr_eq --budget 1400 --allocator none --json");
  REQUIRE(r.exit_code == 0);
  const auto run = nlohmann::json::parse(r.output);
  CHECK(run["compute_ns"].get<uint64_t>() - run["baseline_compute_ns"].get<uint64_t>() >=
        b["remat_ns"].get<uint64_t>());
  // Bad input: the usual exit code 2 and a message.
  const auto bad = run_command(sim() + " bound --trace " + trace + " --budget lots");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("budget") != std::string::npos);
  const auto zero = run_command(sim() + " bound --trace " + trace + " --budget 0");
  CHECK(zero.exit_code == 2);
  CHECK(zero.output.find("nothing to bound") != std::string::npos);
  const auto rounds =
      run_command(sim() + " bound --trace " + trace + " --budget 0.5 --lp-rounds x");
  CHECK(rounds.exit_code != 0);
  CHECK(rounds.output.find("--lp-rounds") != std::string::npos);
}

TEST_CASE("dtr-sim: zero ratios, empty budget items, a trace named twice exit 2 before any work",
          "[sim][cli]") {
  // The seventy-sixth session's probe of the tools' input. A budget is checked before the
  // trace is read: a trace that does not exist shows it (its error would come first).
  const std::string small = test_data("golden/small.log");
  const std::string missing = " --trace /nonexistent/t.log";
  const std::string zero_ratio = "a ratio must be in (0,1]; for no budget write 0 or unlimited";
  struct Case {
    std::string command, message;
  };
  const std::vector<Case> cases = {
      // Note [Budget syntax]: no longer read as "no budget".
      {sim() + " run --trace " + small + " --budget 0x --allocator none",
       "bad value '0x' for option 'budget': " + zero_ratio},
      {sim() + " run --trace " + small + " --budget 0.0x --allocator none",
       "bad value '0.0x' for option 'budget': " + zero_ratio},
      {"DTR_BUDGET=0x " + sim() + " run --trace " + small + " --allocator none",
       "'0x' for option 'budget' from DTR_BUDGET: " + zero_ratio},
      {sim() + " bound" + missing + " --budget 0x", "bad budget '0x': " + zero_ratio},
      {sim() + " sweep" + missing + " --budgets 0x --quiet", "'0x' is not a number"},
      // Note [Empty items in a budget list]: bound as sweep.
      {sim() + " bound" + missing + " --budget 0.5,,0.3",
       "bad budget list '0.5,,0.3': item 2 is empty; drop the stray comma"},
      {sim() + " sweep" + missing + " --budgets 0.5,,0.3 --quiet",
       "bad budget list '0.5,,0.3': item 2 is empty; drop the stray comma"},
      // Note [A trace named twice]: by path, or by inode where the spelling differs.
      {sim() + " sweep --trace " + small + " " + small + " --budgets 0.5 --quiet",
       "trace '" + small + "' is named twice in the sweep; its results would merge"},
      {sim() + " sweep --trace " + small + " " + test_data("golden/../golden/small.log") +
           " --budgets 0.5 --quiet",
       "is named twice in the sweep (also as '" + small + "')"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(c.command);
    INFO(c.command << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}

TEST_CASE("dtr-sim: a trace line over the reader's cap exits 2, quoting a short prefix",
          "[sim][cli]") {
  // Note [Reading line by line]: `--trace /dev/zero` grew until the allocator aborted, and
  // a 50 MB name was echoed whole. A file of one line a MiB over the cap stands in for /dev/zero.
  const std::string path = "/tmp/dtr-sim-cli-long-line-" + std::to_string(getpid()) + ".log";
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(dtr::kMaxTraceLineBytes + (size_t{1} << 20), 'a') << "\n";
  }
  const auto r = run_command(sim() + " run --trace " + path + " --budget 0.5");
  INFO(r.output.substr(0, 400));
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(path + ":1: line 1 is longer than 16 MiB") != std::string::npos);
  CHECK(r.output.size() < 1000);
  // An endless file without a newline: refused once the cap is read, not read to the end.
  const auto zero = run_command(sim() + " run --trace /dev/zero --budget 0.5");
  CHECK(zero.exit_code == 2);
  CHECK(zero.output.find("/dev/zero:1: line 1 is longer than 16 MiB") != std::string::npos);
  // A long name within the cap is quoted by its first 80 characters.
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"x\"}\n"
        << "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"" << std::string(512 * 1024, 'n') << "\"}\n";
  }
  const auto name = run_command(sim() + " run --trace " + path + " --budget 0.5");
  INFO(name.output.substr(0, 400));
  CHECK(name.exit_code == 2);
  CHECK(name.output.find(":2: name '" + std::string(80, 'n') + "...' used before it is defined") !=
        std::string::npos);
  CHECK(name.output.size() < 1000);
  std::remove(path.c_str());
}
