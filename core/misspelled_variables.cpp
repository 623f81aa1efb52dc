// misspelled_variables.cpp: a DTR_ variable whose name is near an option's is an error.
//
// Note [Misspelled variables]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A DTR_<NAME> the option table does not have is not read, so DTR_BUGDET=10M ran without a
// budget and without a word. But the project's own tools read other DTR_ variables
// (DTR_LIBRARY, DTR_PARENT_PID, DTR_LOAD_RAISES, the tests' DTR_SIM, ...), and a user's
// environment may hold any (DTR_PORT, DTR_PLANS), so an unknown one is an error only where
// it is near the variable of an option, or DTR_CONF:
//  - the same name in another case (DTR_Budget, DTR_conf);
//  - one letter off, or two letters swapped (optimal string alignment distance 1), from an
//    option whose name has at least 6 letters (DTR_BUGDET, DTR_POLCY, DTR_BUDGETS); shorter
//    names are too near ordinary words: a first rule of two edits on any name refused
//    DTR_PORT (REPORT), DTR_PLOT (PLAN) and DTR_SPEED (SEED);
//  - DTR_CONF with up to 4 letters added (DTR_CONFIG).
// The message names the nearest option meant. Checked by Config::apply_environment, so
// the PyTorch host, the CUDA allocator and the tools all refuse it at start.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/core/options.h"

extern char** environ;  // POSIX: the process's environment

namespace dtr {

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring letters, each 1.
size_t alignment_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

constexpr size_t kNotNear = SIZE_MAX;
constexpr std::string_view kPrefix = "DTR_";

// How near `var` is to the variable `env` under the rules above (0: another case), or
// kNotNear.
size_t nearness(std::string_view var, std::string_view env) {
  if (iequals(var, env)) return 0;
  if (env == "DTR_CONF")
    return var.size() <= env.size() + 4 && iequals(var.substr(0, env.size()), env)
               ? var.size() - env.size()
               : kNotNear;
  const std::string_view name = env.substr(kPrefix.size());
  if (name.size() < 6) return kNotNear;
  return alignment_distance(var.substr(kPrefix.size()), name) <= 1 ? 1 : kNotNear;
}

}  // namespace

void check_misspelled_variables() {
  for (char** entry = ::environ; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    const std::string_view var = text.substr(0, text.find('='));
    if (var.substr(0, kPrefix.size()) != kPrefix || var == "DTR_CONF") continue;
    bool known = false;
    const OptionInfo* meant = nullptr;
    size_t best = kNotNear;
    for (const OptionInfo& option : option_table()) {
      if (var == option.env) {
        known = true;
        break;
      }
      const size_t near = nearness(var, option.env);
      if (near < best) {
        best = near;
        meant = &option;
      }
    }
    if (known) continue;
    if (const size_t near = nearness(var, "DTR_CONF"); near < best)
      throw ConfigError("dtr: unknown environment variable " + std::string(var) +
                        "; did you mean DTR_CONF? Unset it or fix its name (docs/config.md)");
    if (meant)
      throw ConfigError("dtr: unknown environment variable " + std::string(var) +
                        "; did you mean " + meant->env + " (option " + meant->key +
                        ")? Unset it or fix its name (docs/config.md lists the options)");
  }
}

}  // namespace dtr
