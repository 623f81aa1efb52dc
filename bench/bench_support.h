// bench_support.h: helpers shared by the benchmarks.
#pragma once

#include <cstdio>
#include <string>

namespace dtr::bench {

// The DTR log in DTR_LOG_DIR whose name starts with `prefix`, or "" if there is none.
inline std::string find_log(const std::string& prefix) {
  std::string cmd = std::string("ls ") + DTR_LOG_DIR + "/" + prefix + "*.log 2>/dev/null | head -n 1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace dtr::bench
