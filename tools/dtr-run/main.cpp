// dtr-run: run a command (a training script) with libdtr_torch.so preloaded.
//
//   dtr-run --budget 300M [--reserved-limit 400M] [--policy dtr_eq] [--report] [--conf k:v,...]
//           -- python3 train.py
//
// Sets LD_PRELOAD to the library next to this tool (<dir of dtr-run>/../lib/
// libdtr_torch.so, or --library), through the preload shim beside it where there is one
// (libdtr_preload.so, which loads it only where PyTorch ops can run), sets each flag, and
// each entry of --conf, as its option's DTR_<NAME> variable, and execs the command: its
// exit status is the command's. Note [Flags win]. The options are checked here with the
// same parser the library uses (and the policy against the registry), so a bad flag, a
// bad inherited DTR_CONF or DTR_<NAME>, or an unknown policy exits with code 2 before
// anything runs. docs/pytorch.md has the whole story.
//
// Note [Flags win]
// ~~~~~~~~~~~~~~~~
// The library reads DTR_CONF, then each DTR_<NAME> over it. Until 2026-12-07 dtr-run
// appended its flags to DTR_CONF, so an inherited DTR_BUDGET=12M beat `--budget 10M`
// without a word, and a flag's value went into DTR_CONF as it was: `--policy
// 'dtr_eq,budget:0'` ran with no budget, and a TMPDIR with a comma broke --svg's runs.
// Now each flag is its own variable, which nothing inherited outranks and no comma splits;
// DTR_CONF is passed on as it came.
//
// With --svg PATH it runs the command twice instead of exec'ing it: once without a budget
// (the baseline) and once as asked, each writing a timeline (DTR_TIMELINE) to a temporary
// file, then draws both runs' allocated bytes, the budget, evictions and remats into PATH
// (sim/memory_picture.h). The exit status is the budgeted run's.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "dtr/core/chrome_trace.h"
#include "dtr/core/options.h"
#include "dtr/core/output_file.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/sim/memory_picture.h"

namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitCannotRun = 127;  // as a shell reports a command it cannot run

// Directory holding this executable, from /proc/self/exe.
std::string executable_dir() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  std::string path(buf.data(), static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

using Settings = std::vector<dtr::ConfEntry>;

// The DTR_<NAME> variable of option `key` (a key the parser accepted).
std::string env_of(const std::string& key) {
  for (const dtr::OptionInfo& option : dtr::option_table())
    if (key == option.key) return option.env;
  return {};
}

// Note [Flags win]: each setting as its option's DTR_<NAME>, in order (a later one wins).
void set_variables(const Settings& settings) {
  for (const dtr::ConfEntry& s : settings) setenv(env_of(s.key).c_str(), s.value.c_str(), 1);
}

// Runs `command` with `settings` over the environment and waits; its exit status
// (128+signal if killed).
int run_child(std::vector<std::string> command, const Settings& settings) {
  const pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "dtr-run: cannot fork: %s\n", std::strerror(errno));
    return kExitCannotRun;
  }
  if (pid == 0) {
    set_variables(settings);
    std::vector<char*> args;
    for (std::string& arg : command) args.push_back(arg.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "dtr-run: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(kExitCannotRun);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// --svg: the baseline run, the budgeted run, the picture. Note that the baseline keeps
// every other option (policy, ...): only its budget and reserved limit are lifted.
int run_for_picture(const std::vector<std::string>& command, const Settings& settings,
                    const std::string& svg) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dtr-run-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string base_json = (dir / "baseline.json").string();
  const std::string run_json = (dir / "run.json").string();
  std::fprintf(stderr, "dtr-run: baseline run (no budget) for the picture\n");
  Settings baseline_settings = settings;
  baseline_settings.insert(baseline_settings.end(),
                           {{"budget", "0"}, {"reserved_limit", "0"}, {"timeline", base_json}});
  const int base_status = run_child(command, baseline_settings);
  std::fprintf(stderr, "dtr-run: run under the budget\n");
  Settings run_settings = settings;
  run_settings.push_back({"timeline", run_json});
  const int status = run_child(command, run_settings);
  int result = status;
  try {
    const dtr::Timeline run = dtr::load_chrome_trace(run_json);
    dtr::Timeline baseline;
    const bool have_baseline = base_status == 0 && fs::exists(base_json);
    if (have_baseline) baseline = dtr::load_chrome_trace(base_json);
    dtr::MemoryPictureOptions options;
    options.title = "allocated memory: " + command.back();
    dtr::write_memory_picture(svg, have_baseline ? &baseline : nullptr, run, options);
    std::fprintf(stderr, "dtr-run: wrote %s%s\n", svg.c_str(),
                 have_baseline ? "" : " (without a baseline: that run failed)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr-run: no picture: %s\n", e.what());
    if (result == 0) result = 1;
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtr-run: run a command with libdtr_torch.so preloaded (docs/pytorch.md)"};
  app.footer("Example: dtr-run --budget 300M --report -- /usr/bin/python3 train.py --epochs 1");
  std::string budget, reserved_limit, policy, conf, library, svg;
  bool report = false;
  std::vector<std::string> command;
  app.add_option("--budget", budget,
                 "hard cap on live CPU tensor bytes: 300M, 4G, or 0.5x of the peak over the "
                 "first two training steps (set from then on); 0 = unlimited");
  app.add_option("--reserved-limit", reserved_limit,
                 "cap on what the allocator holds from the system, cached segments included "
                 "(option reserved_limit): 400M, 5G, 0 = unlimited");
  app.add_option("--policy", policy, "eviction heuristic, by registry name (see `dtr-sim policies`)");
  app.add_flag("--report", report, "print a summary of the allocator's stats at exit");
  app.add_option("--conf", conf,
                 "more options, key:value,... as in DTR_CONF (e.g. debug:1); like the flags, they "
                 "win over DTR_CONF and DTR_<NAME> variables already set");
  app.add_option("--library", library, "the library to preload (default: ../lib/libdtr_torch.so "
                 "next to this tool)");
  app.add_option("--svg", svg, "run twice (no budget, then as asked) and draw both runs' "
                 "allocated memory, the budget, evictions and remats here");
  app.add_option("command", command, "the command to run, after --")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }

  // Note [Flags win]: --conf's entries, then the flags, each as its DTR_<NAME>.
  Settings settings;
  try {
    settings = dtr::split_conf(conf);
    if (app.count("--budget") > 0) settings.push_back({"budget", budget});
    if (app.count("--reserved-limit") > 0) settings.push_back({"reserved_limit", reserved_limit});
    if (app.count("--policy") > 0) settings.push_back({"policy", policy});
    if (report) settings.push_back({"report", "True"});
    // Note [Flags win]: an empty DTR_<NAME> counts as unset, so an empty value would lose
    // to an inherited DTR_CONF entry where the flag meant to clear it.
    for (const dtr::ConfEntry& s : settings)
      if (s.value.find_first_not_of(" \t") == std::string::npos)
        throw dtr::ConfigError("dtr-run: option " + s.key +
                               " has an empty value; give one (budget:0 and "
                               "reserved_limit:0 lift a limit)");
    // What the library will read: DTR_CONF, the inherited DTR_<NAME>, then these.
    dtr::Config check = dtr::Config::for_pytorch();
    check.apply_environment();
    for (const dtr::ConfEntry& s : settings) check.set(s.key, s.value);
    dtr::builtin_heuristics().require(check.policy);
    // A budget may be a ratio (Note [Ratio budgets] in integration/torch/lineage.cpp).
    if (check.reserved_limit.kind == dtr::Budget::Kind::ratio)
      throw dtr::ConfigError("dtr-run: --reserved-limit " + check.reserved_limit.to_string() +
                             " is a ratio; a live run needs bytes, e.g. --reserved-limit 300M");
    // Note [Output files]: the picture's path before two training runs.
    if (!svg.empty()) dtr::check_writable(svg, "memory picture");
  } catch (const dtr::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::OutputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitBadInput;
  }

  if (library.empty()) library = executable_dir() + "/../lib/libdtr_torch.so";
  if (access(library.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "dtr-run: cannot read the library %s (%s); build the dtr_torch target "
                 "or pass --library\n", library.c_str(), std::strerror(errno));
    return kExitBadInput;
  }
  // Note [Preload shim] (integration/torch/process_kind.cpp): the shim beside the library
  // loads it only into processes that can run PyTorch ops, so a wrapper, a shell or a
  // tool in front of Python does not load libtorch (1.3 s each).
  std::string preload = library;
  if (const std::filesystem::path lib_path(library); lib_path.filename() == "libdtr_torch.so") {
    const std::string shim = (lib_path.parent_path() / "libdtr_preload.so").string();
    if (access(shim.c_str(), R_OK) == 0) preload = shim;
  }
  if (const char* inherited = std::getenv("LD_PRELOAD"); inherited && *inherited)
    preload += std::string(" ") + inherited;
  setenv("LD_PRELOAD", preload.c_str(), 1);

  // A fresh start: the command writes the files it is given, also when dtr-run itself runs
  // in a child of a dtr process (Note [Files of child processes] in runtime.cpp).
  unsetenv("DTR_PARENT_PID");
  if (!svg.empty()) return run_for_picture(command, settings, svg);
  set_variables(settings);

  std::vector<char*> args;
  for (std::string& arg : command) args.push_back(arg.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "dtr-run: cannot run %s: %s\n", args[0], std::strerror(errno));
  return kExitCannotRun;
}
