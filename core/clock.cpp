// clock.cpp: SteadyClock reads std::chrono::steady_clock in nanoseconds.
#include "dtr/core/clock.h"

#include <chrono>

namespace dtr {

Tick SteadyClock::now() const {
  return static_cast<Tick>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count());
}

}  // namespace dtr
