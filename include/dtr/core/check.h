// check.h: always-on checks (DTR_CHECK) and debug-only assertions (DTR_ASSERT).
//
// Both report file and line and abort: they guard invariants whose violation means
// the runtime's own state is corrupt, never bad user input (that is a Status or a
// typed error). DTR_ASSERT compiles away unless NDEBUG is unset.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace dtr {
[[noreturn]] inline void check_failed(const char* expr, const char* msg, const char* file, int line) {
  std::fprintf(stderr, "dtr: internal check failed: %s (%s) at %s:%d\n", expr, msg, file, line);
  std::abort();
}
}  // namespace dtr

#define DTR_CHECK(cond, msg)                                       \
  do {                                                             \
    if (__builtin_expect(!(cond), 0))                              \
      ::dtr::check_failed(#cond, (msg), __FILE__, __LINE__);       \
  } while (0)

#ifdef NDEBUG
#define DTR_ASSERT(cond, msg) \
  do {                        \
  } while (0)
#else
#define DTR_ASSERT(cond, msg) DTR_CHECK(cond, msg)
#endif
