// test_support.h: helpers shared by the tests.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dtr::test {

// Sets an environment variable for one scope and restores the old value after it.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~EnvGuard() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline std::string log_path(const std::string& prefix) {
  // The three DTR logs live in ../shared/data/dtr-logs; pick the file starting with prefix.
  std::string cmd =
      std::string("ls ") + DTR_LOG_DIR + "/" + prefix + "*.log 2>/dev/null | head -n 1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// A file under tests/data.
inline std::string test_data(const std::string& rel) {
  return std::string(DTR_TEST_DATA_DIR) + "/" + rel;
}

// The index of the node called `name` in a planner Graph; throws if there is none.
template <typename Graph>
uint32_t node_named(const Graph& g, const std::string& name) {
  for (uint32_t i = 0; i < g.size(); ++i)
    if (g.nodes[i].name == name) return i;
  throw std::runtime_error("no node named " + name);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  std::string full = cmd + " 2>&1";
  if (FILE* p = popen(full.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return r;
}

}  // namespace dtr::test
