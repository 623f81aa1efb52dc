// test_options.cpp: the option table, its parsers, DTR_CONF, the environment and the
// generated docs/config.md.
//
// Tests that touch the environment save and restore every variable they set (see
// EnvGuard), so they leave the process as they found it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dtr/core/options.h"

namespace {

using dtr::Budget;
using dtr::Config;
using dtr::ConfigError;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

// The message of the ConfigError that `fn` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Sets (or unsets, with nullopt) environment variables for one scope, then restores them.
class EnvGuard {
 public:
  void set(const char* name, std::optional<std::string> value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->value) {
        ::setenv(it->name.c_str(), it->value->c_str(), 1);
      } else {
        ::unsetenv(it->name.c_str());
      }
    }
  }

 private:
  struct Saved {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved_;
};

// Clears DTR_CONF and every DTR_<NAME>, so a developer's own settings cannot leak in.
void clear_dtr_environment(EnvGuard& env) {
  env.set("DTR_CONF", std::nullopt);
  for (const dtr::OptionInfo& option : dtr::option_table()) env.set(option.env, std::nullopt);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("option table lists every option in order", "[core][options]") {
  const auto& table = dtr::option_table();
  REQUIRE(table.size() == 32);
  CHECK(std::string(table[0].key) == "budget");
  CHECK(std::string(table[0].env) == "DTR_BUDGET");
  CHECK(std::string(table[1].key) == "policy");
  CHECK(std::string(table.back().key) == "report");
  CHECK(dtr::valid_option_keys() ==
        "budget, policy, trial, search, sample, dead_first, dead_first_ratio, dead_lineage_factor, "
        "remake_factor, keep_near_large, lazy_release, relax_locks, seed, max_overhead, on_thrash, "
        "reserved_limit, "
        "compact, allocator, debug, trace, trace_constants, plan, plan_trace, remat, pack_masks, "
        "min_evictable, "
        "op_cost, snapshot, snapshot_format, snapshot_entries, timeline, report");
  for (const auto& option : table) {
    CHECK(std::string(option.env) != "");
    CHECK(std::string(option.doc) != "");
  }
}

TEST_CASE("defaults come from the table", "[core][options]") {
  const Config config;
  CHECK(config.budget.kind == Budget::Kind::unlimited);
  CHECK(config.policy == "auto");
  CHECK(config.search == "full");
  CHECK(config.sample == 0u);
  CHECK(config.seed == 0u);
  CHECK(config.max_overhead == 2.0);
  CHECK(config.debug == 0u);
  CHECK(config.trace == "");
  CHECK(config.report == false);
  for (const auto& option : dtr::option_table()) {
    Config reparsed;
    reparsed.set(option.key, option.default_value);
    CHECK(reparsed.get(option.key) == config.get(option.key));
  }
}

TEST_CASE("the PyTorch host's defaults differ only where the table says so", "[core][options]") {
  const Config sim;
  const Config host = Config::for_pytorch();
  CHECK_FALSE(sim.dead_first);  // the simulator: as simrd
  CHECK(host.dead_first);
  CHECK(sim.dead_lineage_factor == 1.0);  // as simrd: Note [Live storages on dead lineage]
  CHECK(host.dead_lineage_factor == 30.0);
  // Opt-in on both (Note [Storages remade again and again]).
  CHECK(host.remake_factor == 0.0);
  for (const auto& option : dtr::option_table()) {
    INFO("option: " << option.key);
    if (option.pytorch_default == nullptr) {
      CHECK(host.get(option.key) == sim.get(option.key));
    } else {
      CHECK(host.get(option.key) != sim.get(option.key));
      Config reparsed;
      reparsed.set(option.key, option.pytorch_default);
      CHECK(reparsed.get(option.key) == host.get(option.key));
    }
  }
  // DTR_CONF and DTR_<NAME> still have the last word.
  EnvGuard env;
  clear_dtr_environment(env);
  env.set("DTR_CONF", "dead_first:False");
  Config config = Config::for_pytorch();
  config.apply_environment();
  CHECK_FALSE(config.dead_first);
  CHECK_THAT(dtr::config_markdown(),
             Catch::Contains("| `dead_first` | `DTR_DEAD_FIRST` | `False` (PyTorch: `True`) |"));
}

TEST_CASE("a size option takes bytes with suffixes, never a ratio or unlimited",
          "[core][options]") {
  Config config;
  CHECK(config.min_evictable.bytes == 16 * kKiB);
  CHECK(config.get("min_evictable") == "16 KiB");
  config.set("min_evictable", "1.5K");
  CHECK(config.min_evictable.bytes == 1536u);
  CHECK(config.get("min_evictable") == "1536 B");
  config.set("min_evictable", "0");  // zero bytes: every result may be evicted
  CHECK(config.min_evictable.bytes == 0u);
  CHECK(config.get("min_evictable") == "0 B");
  config.apply_conf("min_evictable:4K");
  CHECK(config.min_evictable.bytes == 4 * kKiB);
  for (const char* bad : {"0.5", "0.4x", "-4K", "4Q", "unlimited", ""}) {
    CAPTURE(bad);
    try {
      config.set("min_evictable", bad);
      FAIL("accepted");
    } catch (const dtr::ConfigError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Matchers::Contains("min_evictable") &&
                           Catch::Matchers::Contains("expected a size such as 4096, 4K or 1.5M"));
    }
  }
  CHECK(config.min_evictable.bytes == 4 * kKiB);  // a bad value changes nothing
}

TEST_CASE("parse_size reads binary suffixes", "[core][options]") {
  CHECK(dtr::parse_size("512") == 512u);
  CHECK(dtr::parse_size("0") == 0u);
  CHECK(dtr::parse_size("4K") == 4 * kKiB);
  CHECK(dtr::parse_size("4k") == 4 * kKiB);
  CHECK(dtr::parse_size("4KB") == 4 * kKiB);
  CHECK(dtr::parse_size("4KiB") == 4 * kKiB);
  CHECK(dtr::parse_size("4kib") == 4 * kKiB);
  CHECK(dtr::parse_size("300M") == 300 * kMiB);
  CHECK(dtr::parse_size("300MB") == 300 * kMiB);
  CHECK(dtr::parse_size("300 MiB") == 300 * kMiB);
  CHECK(dtr::parse_size("2G") == 2 * kGiB);
  CHECK(dtr::parse_size("2gb") == 2 * kGiB);
  CHECK(dtr::parse_size("2GiB") == 2 * kGiB);
  CHECK(dtr::parse_size("1.5G") == 3 * kGiB / 2);
  CHECK(dtr::parse_size("0.5K") == 512u);
  CHECK(dtr::parse_size("0.1K") == 102u);  // truncated
  CHECK(dtr::parse_size("  64M  ") == 64 * kMiB);
  CHECK(dtr::parse_size("1T") == 1024 * kGiB);
  CHECK(dtr::parse_size("18446744073709551615") == std::numeric_limits<uint64_t>::max());

  for (const char* bad : {"", "  ", "abc", "-1", "-4K", "4Q", "4KK", "1.5", "M", ".", "1e5",
                          "+4K", "18446744073709551616", "16777216T"}) {
    INFO("text: '" << bad << "'");
    CHECK_THROWS_AS(dtr::parse_size(bad), ConfigError);
  }
  CHECK_THAT(error_of([] { dtr::parse_size("4Q"); }), Catch::Contains("4Q") && Catch::Contains("suffix"));
}

TEST_CASE("Budget::parse tells unlimited, bytes and ratios apart", "[core][options]") {
  for (const char* text : {"", "0", "0.0", "0M", "unlimited", "  0  "}) {
    INFO("text: '" << text << "'");
    CHECK(Budget::parse(text).kind == Budget::Kind::unlimited);
  }

  const Budget bytes = Budget::parse("300M");
  CHECK(bytes.kind == Budget::Kind::bytes);
  CHECK(bytes.bytes == 300 * kMiB);
  CHECK(Budget::parse("4G").bytes == 4 * kGiB);
  CHECK(Budget::parse("4gib").bytes == 4 * kGiB);
  CHECK(Budget::parse("1.5G").bytes == 3 * kGiB / 2);
  CHECK(Budget::parse("123456").kind == Budget::Kind::bytes);
  CHECK(Budget::parse("123456").bytes == 123456u);
  CHECK(Budget::parse("1").kind == Budget::Kind::bytes);  // a plain integer is bytes
  CHECK(Budget::parse("1").bytes == 1u);

  const Budget ratio = Budget::parse("0.4");
  CHECK(ratio.kind == Budget::Kind::ratio);
  CHECK(ratio.ratio == 0.4);
  CHECK(Budget::parse("1.0").kind == Budget::Kind::ratio);
  CHECK(Budget::parse("1.0").ratio == 1.0);
  CHECK(Budget::parse(".25").ratio == 0.25);
  CHECK(Budget::parse("0.4x").kind == Budget::Kind::ratio);
  CHECK(Budget::parse("0.4x").ratio == 0.4);
  CHECK(Budget::parse("1x").kind == Budget::Kind::ratio);

  for (const char* bad : {"-1", "-0.4", "1.5", "2.0", "abc", "4Q", "1.5x", "x", "0.4.1", "nan", "inf", "G"}) {
    INFO("text: '" << bad << "'");
    CHECK_THROWS_AS(Budget::parse(bad), ConfigError);
  }
  const std::string ambiguous = error_of([] { Budget::parse("1.5"); });
  CHECK_THAT(ambiguous, Catch::Contains("1.5G") && Catch::Contains("ambiguous"));
  CHECK_THAT(error_of([] { Budget::parse("-1"); }), Catch::Contains("negative"));
}

TEST_CASE("Budget::parse refuses a ratio of zero or below, not reading it as no budget",
          "[core][options]") {
  // Note [Budget syntax]: "0x" and "0.0x" meant no budget, as "0" does (the seventy-sixth
  // session's probe), where docs/config.md says a ratio is in (0,1].
  for (const char* bad : {"0x", "0.0x", "0X", " 0.000x ", "0 x", ".0x", "-0x", "-0.5x"}) {
    INFO("text: '" << bad << "'");
    const std::string error = error_of([&] { Budget::parse(bad); });
    CHECK_THAT(error, Catch::StartsWith("dtr: bad budget '"));
    CHECK_THAT(error, Catch::Contains("(0,1]") || Catch::Contains("negative"));
  }
  CHECK_THAT(error_of([] { Budget::parse("0x"); }),
             Catch::Contains("a ratio must be in (0,1]; for no budget write 0 or unlimited"));
  // The environment's DTR_BUDGET (and DTR_RESERVED_LIMIT) go through the same parser.
  Config config;
  CHECK_THROWS_AS(config.set("budget", "0x"), ConfigError);
  CHECK_THROWS_AS(config.set("reserved_limit", "0.0x"), ConfigError);
  config.set("budget", "0");
  CHECK(config.budget.kind == Budget::Kind::unlimited);
}

TEST_CASE("Budget::resolve", "[core][options]") {
  CHECK(Budget{}.resolve(1000) == std::numeric_limits<uint64_t>::max());
  CHECK(Budget::parse("300M").resolve(1) == 300 * kMiB);
  CHECK(Budget::parse("0.4").resolve(1000) == 400u);
  CHECK(Budget::parse("1.0").resolve(12345) == 12345u);
  // int(baseline * ratio): a double product, truncated.
  CHECK(Budget::parse("0.3").resolve(10) == static_cast<uint64_t>(10 * 0.3));
  CHECK(Budget::parse("0.5").resolve(3) == 1u);
  CHECK(Budget::parse("0.5").resolve(0) == 0u);
}

TEST_CASE("Budget::to_string is readable and parses back", "[core][options]") {
  CHECK(Budget{}.to_string() == "unlimited");
  CHECK(Budget::parse("300M").to_string() == "300 MiB");
  CHECK(Budget::parse("4G").to_string() == "4 GiB");
  CHECK(Budget::parse("1.5G").to_string() == "1536 MiB");
  CHECK(Budget::parse("512K").to_string() == "512 KiB");
  CHECK(Budget::parse("123456").to_string() == "123456 B");
  CHECK(Budget::parse("0.4").to_string() == "0.4x");
  CHECK(Budget::parse("1.0").to_string() == "1.0x");
  for (const char* text : {"", "300M", "4G", "1.5G", "123456", "1", "0.4", "1.0", "0.123456789", "0.00001"}) {
    INFO("text: '" << text << "'");
    const Budget once = Budget::parse(text);
    const Budget twice = Budget::parse(once.to_string());
    CHECK(twice.kind == once.kind);
    CHECK(twice.bytes == once.bytes);
    CHECK(twice.ratio == once.ratio);
  }
}

TEST_CASE("set parses each type", "[core][options]") {
  Config config;

  SECTION("strings are taken as is") {
    config.set("policy", "dtr_local");
    CHECK(config.policy == "dtr_local");
    config.set("trace", " /tmp/a b.trace ");
    CHECK(config.trace == " /tmp/a b.trace ");
    config.set("trace", "");
    CHECK(config.trace == "");
  }

  SECTION("uint32_t") {
    config.set("sample", "64");
    CHECK(config.sample == 64u);
    config.set("sample", "4294967295");
    CHECK(config.sample == 4294967295u);
    for (const char* bad : {"-1", "abc", "", "4294967296", "1.5", "+3", "0x10", "12abc"}) {
      INFO("text: '" << bad << "'");
      CHECK_THROWS_AS(config.set("sample", bad), ConfigError);
    }
    CHECK(config.sample == 4294967295u);  // unchanged by the failures
  }

  SECTION("uint64_t") {
    config.set("seed", "18446744073709551615");
    CHECK(config.seed == std::numeric_limits<uint64_t>::max());
    config.set("seed", "42");
    CHECK(config.seed == 42u);
    for (const char* bad : {"-1", "abc", "", "18446744073709551616", "4K"}) {
      INFO("text: '" << bad << "'");
      CHECK_THROWS_AS(config.set("seed", bad), ConfigError);
    }
  }

  SECTION("double") {
    config.set("max_overhead", "1.5");
    CHECK(config.max_overhead == 1.5);
    config.set("max_overhead", "0");
    CHECK(config.max_overhead == 0.0);
    config.set("max_overhead", "3");
    CHECK(config.max_overhead == 3.0);
    config.set("max_overhead", "1e3");
    CHECK(config.max_overhead == 1000.0);
    for (const char* bad : {"-1", "-0.5", "abc", "", "inf", "nan", "1.5x", "+2", "1e999"}) {
      INFO("text: '" << bad << "'");
      CHECK_THROWS_AS(config.set("max_overhead", bad), ConfigError);
    }
  }

  SECTION("bool") {
    for (const char* yes : {"True", "true", "1"}) {
      config.report = false;
      config.set("report", yes);
      CHECK(config.report);
    }
    for (const char* no : {"False", "false", "0"}) {
      config.report = true;
      config.set("report", no);
      CHECK_FALSE(config.report);
    }
    for (const char* bad : {"yes", "TRUE", "2", "", "on"}) {
      INFO("text: '" << bad << "'");
      CHECK_THROWS_AS(config.set("report", bad), ConfigError);
    }
  }

  SECTION("budget") {
    config.set("budget", "4G");
    CHECK(config.budget.kind == Budget::Kind::bytes);
    CHECK(config.budget.bytes == 4 * kGiB);
    config.set("budget", "0.4");
    CHECK(config.budget.kind == Budget::Kind::ratio);
    config.set("budget", "0");
    CHECK(config.budget.kind == Budget::Kind::unlimited);
    CHECK_THROWS_AS(config.set("budget", "1.5"), ConfigError);
  }
}

TEST_CASE("a bad value names the key, the value and the expected form", "[core][options]") {
  Config config;
  const std::string sample = error_of([&] { config.set("sample", "-1"); });
  CHECK_THAT(sample, Catch::Contains("'sample'") && Catch::Contains("'-1'") && Catch::Contains("expected"));

  const std::string budget = error_of([&] { config.set("budget", "lots"); });
  CHECK_THAT(budget, Catch::Contains("'budget'") && Catch::Contains("'lots'") &&
                         Catch::Contains("a size such as 512, 300M, 4G"));

  const std::string report = error_of([&] { config.set("report", "yes"); });
  CHECK_THAT(report, Catch::Contains("'report'") && Catch::Contains("True or False"));

  const std::string overhead = error_of([&] { config.set("max_overhead", "-2"); });
  CHECK_THAT(overhead, Catch::Contains("'max_overhead'") && Catch::Contains("negative"));

  // A factor under 1 would put storages on dead lineage first; 1 turns the rule off.
  const std::string factor = error_of([&] { config.apply_conf("dead_lineage_factor:0.5"); });
  CHECK_THAT(factor, Catch::Contains("'dead_lineage_factor'") && Catch::Contains("'0.5'") &&
                         Catch::Contains("must be at least 1"));
  CHECK(config.dead_lineage_factor == 1.0);  // the bad value was not taken
  config.apply_conf("dead_lineage_factor:1");
  config.set("dead_lineage_factor", "100");
  CHECK(config.dead_lineage_factor == 100.0);
}

TEST_CASE("number options outside their range are refused for every source", "[core][options]") {
  // Note [Option ranges]: max_overhead is a multiple of the program's compute, so 0.5 read
  // as "50% more" would act at the first remat; 0 turns it off.
  Config config;
  const std::string half = error_of([&] { config.apply_conf("max_overhead:0.5"); });
  CHECK_THAT(half, Catch::Contains("'max_overhead'") && Catch::Contains("'0.5'") &&
                       Catch::Contains("must be 0 (off) or at least 1"));
  CHECK(config.max_overhead == 2.0);  // the bad value was not taken
  for (const double good : {0.0, 1.0, 1.5}) {  // the ends of the range are in it
    config.set("max_overhead", std::to_string(good));
    CHECK(config.max_overhead == good);
  }

  // An integer option with a top: debug is 0..3.
  const std::string debug = error_of([&] { config.set("debug", "4"); });
  CHECK_THAT(debug, Catch::Contains("'debug'") && Catch::Contains("must be 0 to 3"));
  CHECK(config.debug == 0);
  config.set("debug", "3");
  CHECK(config.debug == 3);

  // The environment goes through the same check, and names its variable.
  EnvGuard guard;
  clear_dtr_environment(guard);
  guard.set("DTR_MAX_OVERHEAD", "0.9");
  Config from_env;
  const std::string env = error_of([&] { from_env.apply_environment(); });
  CHECK_THAT(env, Catch::Contains("from DTR_MAX_OVERHEAD") && Catch::Contains("at least 1"));

  // Every range is in the table the docs come from; options without one print nothing.
  for (const auto& option : dtr::option_table()) {
    const std::string key = option.key;
    INFO("option: " << key);
    if (key == "max_overhead")
      CHECK(option.range == "0 (off) or at least 1");
    else if (key == "dead_lineage_factor")
      CHECK(option.range == "at least 1");
    else if (key == "keep_near_large")
      CHECK(option.range == "0 (off) or at least 1");
    else if (key == "debug")
      CHECK(option.range == "0 to 3");
    else if (key == "trial")  // Note [Option choices]: the words of a text option
      CHECK(option.range == "one of replay, live");
    else if (key == "allocator")
      CHECK(option.range == "one of fake, host, none");
    else if (key == "search" || key == "on_thrash" || key == "trace_constants" ||
             key == "op_cost" || key == "snapshot_format")
      CHECK(option.range.rfind("one of ", 0) == 0);
    else
      CHECK(option.range.empty());
  }
}

TEST_CASE("a text option that takes one of a few words refuses any other, from every source",
          "[core][options]") {
  // Note [Option choices]: checked where the value is set, not where a layer first reads
  // it (the PyTorch host never read `allocator`; dtr-sim never read `op_cost`).
  Config config;
  const std::string conf = error_of([&] { config.apply_conf("search:nope"); });
  CHECK_THAT(conf, Catch::Contains("'nope'") && Catch::Contains("'search'") &&
                       Catch::Contains("in DTR_CONF") &&
                       Catch::Contains("expected one of full, sample"));
  CHECK(config.search == "full");  // the bad value was not taken
  for (const char* key : {"trial", "search", "on_thrash", "allocator", "trace_constants", "op_cost",
                          "snapshot_format"}) {
    INFO(key);
    CHECK_THROWS_AS(config.set(key, "nope"), dtr::ConfigError);
    CHECK_THROWS_AS(config.set(key, ""), dtr::ConfigError);
    const std::string words = error_of([&] { config.set(key, "NOPE"); });
    const std::string first =
        words.substr(words.find("one of ") + 7,
                     words.find_first_of(",", words.find("one of ")) - words.find("one of ") - 7);
    config.set(key, first);  // the first word is taken, as is
    CHECK(config.get(key) == first);
  }
  config.set("allocator", "host");
  CHECK(config.allocator == "host");
  CHECK_THROWS_AS(config.set("allocator", "Host"), dtr::ConfigError);  // words are exact

  EnvGuard guard;
  clear_dtr_environment(guard);
  guard.set("DTR_ON_THRASH", "stop");
  Config from_env;
  const std::string env = error_of([&] { from_env.apply_environment(); });
  CHECK_THAT(env, Catch::Contains("from DTR_ON_THRASH") && Catch::Contains("warn, raise"));
}

TEST_CASE("split_conf gives DTR_CONF's entries in order, brackets off", "[core][options]") {
  const std::vector<dtr::ConfEntry> e = dtr::split_conf(" budget:10M,,trace:[/a,b:c] , policy:x");
  REQUIRE(e.size() == 3);
  CHECK((e[0].key == "budget" && e[0].value == "10M"));
  CHECK((e[1].key == "trace" && e[1].value == "/a,b:c"));
  CHECK((e[2].key == "policy" && e[2].value == "x"));  // keys and values are not checked
  CHECK_THROWS_AS(dtr::split_conf("budget"), dtr::ConfigError);
  CHECK_THROWS_AS(dtr::split_conf("trace:[/a"), dtr::ConfigError);
  CHECK(dtr::split_conf("").empty());
}

TEST_CASE("an unknown key lists the valid keys", "[core][options]") {
  Config config;
  const std::string direct = error_of([&] { config.set("budgt", "4G"); });
  CHECK_THAT(direct, Catch::Contains("unknown option 'budgt'") && Catch::Contains("budget") &&
                         Catch::Contains("policy") && Catch::Contains(dtr::valid_option_keys()));

  const std::string from_conf = error_of([&] { config.apply_conf("budgt:4G"); });
  CHECK(from_conf == "dtr: unknown option 'budgt' in DTR_CONF; valid keys: " + dtr::valid_option_keys());

  CHECK_THAT(error_of([&] { (void)config.get("nope"); }),
             Catch::Contains("unknown option 'nope'") && Catch::Contains("policy"));
}

TEST_CASE("DTR_CONF tokenizing", "[core][options]") {
  Config config;

  SECTION("pairs, in order") {
    config.apply_conf("budget:300M,policy:dtr_eq,search:sample");
    CHECK(config.budget.bytes == 300 * kMiB);
    CHECK(config.policy == "dtr_eq");
    CHECK(config.search == "sample");
    config.apply_conf("sample:8,sample:16");  // the later one wins
    CHECK(config.sample == 16u);
  }

  SECTION("whitespace around tokens is ignored") {
    config.apply_conf("  budget : 4G ,\tpolicy:  dtr_local  , report:True ");
    CHECK(config.budget.bytes == 4 * kGiB);
    CHECK(config.policy == "dtr_local");
    CHECK(config.report);
  }

  SECTION("bracketed values keep their commas") {
    config.apply_conf("trace:[a:b,c:d],sample:3");
    CHECK(config.trace == "a:b,c:d");
    CHECK(config.sample == 3u);
    config.apply_conf("policy: [ x,[y,z] ] ");
    CHECK(config.policy == "x,[y,z]");
    CHECK_THROWS_AS(config.apply_conf("trace:[a,b"), ConfigError);
    CHECK_THROWS_AS(config.apply_conf("trace:[a]b,sample:1"), ConfigError);
  }

  SECTION("an unbracketed value may hold ':'") {
    config.apply_conf("trace:/tmp/a:b.trace,seed:7");
    CHECK(config.trace == "/tmp/a:b.trace");
    CHECK(config.seed == 7u);
  }

  SECTION("empty string and empty entries do nothing") {
    const Config before;
    config.apply_conf("");
    config.apply_conf("   ");
    config.apply_conf(",, ,");
    for (const auto& option : dtr::option_table()) CHECK(config.get(option.key) == before.get(option.key));
    config.apply_conf("sample:5,");
    CHECK(config.sample == 5u);
  }

  SECTION("an entry without ':' is an error") {
    CHECK_THAT(error_of([&] { config.apply_conf("budget"); }), Catch::Contains("expected key:value"));
    CHECK_THAT(error_of([&] { config.apply_conf("budget:4G,policy"); }),
               Catch::Contains("expected key:value") && Catch::Contains("policy"));
    CHECK_THROWS_AS(config.apply_conf(":4G"), ConfigError);
  }

  SECTION("bad values name the key and DTR_CONF") {
    const std::string message = error_of([&] { config.apply_conf("policy:x,sample:many"); });
    CHECK_THAT(message, Catch::Contains("'sample'") && Catch::Contains("'many'") && Catch::Contains("DTR_CONF"));
  }
}

TEST_CASE("environment: defaults < DTR_CONF < DTR_<NAME>", "[core][options]") {
  EnvGuard env;
  clear_dtr_environment(env);

  SECTION("nothing set leaves the defaults") {
    Config config;
    config.apply_environment();
    const Config defaults;
    for (const auto& option : dtr::option_table()) CHECK(config.get(option.key) == defaults.get(option.key));
  }

  SECTION("DTR_CONF over defaults, DTR_<NAME> over DTR_CONF") {
    env.set("DTR_CONF", "budget:300M,policy:dtr_eq,search:sample,sample:8");
    env.set("DTR_POLICY", "dtr_local");
    env.set("DTR_SAMPLE", "");  // empty counts as unset
    env.set("DTR_REPORT", "True");
    Config config;
    config.apply_environment();
    CHECK(config.budget.bytes == 300 * kMiB);
    CHECK(config.search == "sample");
    CHECK(config.policy == "dtr_local");
    CHECK(config.sample == 8u);
    CHECK(config.report);
    CHECK(config.seed == 0u);
  }

  SECTION("errors name the variable") {
    env.set("DTR_DEBUG", "loud");
    Config config;
    CHECK_THAT(error_of([&] { config.apply_environment(); }),
               Catch::Contains("'debug'") && Catch::Contains("DTR_DEBUG") && Catch::Contains("'loud'"));
  }

  SECTION("an unknown key in DTR_CONF lists the valid keys") {
    env.set("DTR_CONF", "sampel:8");
    Config config;
    CHECK_THAT(error_of([&] { config.apply_environment(); }),
               Catch::Contains("unknown option 'sampel' in DTR_CONF") && Catch::Contains("budget, policy"));
  }
}

TEST_CASE("set(k, get(k)) round-trips every option", "[core][options]") {
  Config config;
  config.set("budget", "1.5G");
  config.set("policy", "dtr_local");
  config.set("search", "sample");
  config.set("sample", "4294967295");
  config.set("seed", "18446744073709551615");
  config.set("max_overhead", "1.1");
  config.set("dead_first_ratio", "0.1");
  config.set("debug", "3");
  config.set("trace", " /tmp/x,y:z.trace");
  config.set("report", "True");

  const Config defaults;
  for (const Config* source : {&defaults, static_cast<const Config*>(&config)}) {
    for (const auto& option : dtr::option_table()) {
      INFO("option: " << option.key << " = '" << source->get(option.key) << "'");
      Config copy;
      copy.set(option.key, source->get(option.key));
      CHECK(copy.get(option.key) == source->get(option.key));
    }
  }

  // Values that do not print exactly as written still come back the same.
  Config ratio;
  ratio.set("budget", "0.1");
  ratio.set("dead_first_ratio", "0.30000000000000004");
  Config copy;
  copy.set("budget", ratio.get("budget"));
  copy.set("dead_first_ratio", ratio.get("dead_first_ratio"));
  CHECK(copy.budget.kind == Budget::Kind::ratio);
  CHECK(copy.budget.ratio == ratio.budget.ratio);
  CHECK(copy.dead_first_ratio == ratio.dead_first_ratio);
  CHECK(defaults.get("max_overhead") == "2.0");
  CHECK(defaults.get("report") == "False");
  CHECK(defaults.get("budget") == "unlimited");
}

TEST_CASE("config_markdown documents every option", "[core][options]") {
  const std::string page = dtr::config_markdown();
  CHECK(page.rfind("# Configuration\n", 0) == 0);
  CHECK_THAT(page, Catch::Contains("DTR_CONF=\"budget:300M,policy:dtr_eq,search:sample\""));
  CHECK_THAT(page, Catch::Contains("| key | environment | default | range | description |"));
  for (const auto& option : dtr::option_table()) {
    INFO("option: " << option.key);
    CHECK_THAT(page, Catch::Contains(std::string("| `") + option.key + "` | `" + option.env + "` |"));
  }
}

TEST_CASE("docs/config.md matches config_markdown()", "[core][options]") {
  const std::string path = std::string(DTR_SOURCE_DIR) + "/docs/config.md";
  const std::string generated = dtr::config_markdown();
  // Note [Regenerating docs/config.md]: DTR_UPDATE_DOCS=1 makes this test write the page
  // instead of checking it; run it once after changing the table, then review the diff.
  if (const char* update = std::getenv("DTR_UPDATE_DOCS"); update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << generated;
  }
  const std::string on_disk = read_text(path);
  INFO(path << " is out of date with the DTR_OPTIONS table in include/dtr/core/options.h. "
            "Regenerate it: DTR_UPDATE_DOCS=1 dtr_tests \"docs/config.md matches config_markdown()\"");
  CHECK(on_disk == generated);
}

TEST_CASE("a variable near an option's is refused, naming the option", "[core][options]") {
  // Note [Misspelled variables]: DTR_BUGDET=10M ran without a budget.
  EnvGuard guard;
  clear_dtr_environment(guard);
  for (const auto& [var, meant] :
       std::vector<std::pair<const char*, const char*>>{{"DTR_BUGDET", "DTR_BUDGET"},
                                                        {"DTR_Budget", "DTR_BUDGET"},
                                                        {"DTR_POLCY", "DTR_POLICY"},
                                                        {"DTR_BUDGETS", "DTR_BUDGET"},
                                                        {"DTR_seed", "DTR_SEED"},
                                                        {"DTR_Conf", "DTR_CONF"},
                                                        {"DTR_CONFIG", "DTR_CONF"}}) {
    INFO(var);
    guard.set(var, "10M");
    Config config;
    const std::string error = error_of([&] { config.apply_environment(); });
    CHECK_THAT(error, Catch::Contains(std::string("unknown environment variable ") + var) &&
                          Catch::Contains(std::string("did you mean ") + meant));
    guard.set(var, std::nullopt);
  }
  // The project's other variables, and any far from an option's, are left alone; short
  // names are near ordinary words (a first rule of two edits on any name refused these).
  for (const char* var :
       {"DTR_LIBRARY", "DTR_PARENT_PID", "DTR_LOAD_RAISES", "DTR_SIM", "DTR_RUN", "DTR_PLAN_TOOL",
        "DTR_DATA_DIR", "DTR_PYTHON", "DTR_SOMETHING_ELSE", "DTR_PORT", "DTR_PLOT", "DTR_SPEED",
        "DTR_ARCH", "DTR_TRACES", "DTR_PLANS", "DTR_REPO"}) {
    INFO(var);
    guard.set(var, "1");
    Config config;
    CHECK_NOTHROW(config.apply_environment());
    guard.set(var, std::nullopt);
  }
}
