// op_context.h: the process and thread state, outside an op's arguments, that changes what
// a CPU kernel computes; captured with each recorded op and put back around its remats
// (Note [Op context] in lineage.cpp). Header-only: lineage.cpp is its one user.
#pragma once

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>
#include <c10/core/ScalarTypeToTypeMeta.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define DTR_HAVE_MXCSR 1
#else
#define DTR_HAVE_MXCSR 0
#endif

#include <algorithm>
#include <cstdint>

#include "integration/torch/compat.h"

namespace dtr::torch_integration {

// What an op saw, packed into one word so that a remat compares it in one instruction.
struct OpContext {
  // Bits 0-7: default dtype (c10::ScalarType); 8: mkldnn enabled; 9-10: deterministic
  // algorithms and their warn-only mode; 11-12: the calling thread's MXCSR flush-to-zero
  // and denormals-are-zero (torch.set_flush_denormal); 13: the thread's grad mode; 16-31:
  // the intra-op thread count (at most 65535); 32-39: the quantized engine
  // (torch.backends.quantized.engine, at::QEngine), which picks quantized::add's kernel.
  uint64_t word = 0;

  static constexpr uint64_t kMkldnn = uint64_t{1} << 8;
  static constexpr uint64_t kDeterministic = uint64_t{1} << 9;
  static constexpr uint64_t kWarnOnly = uint64_t{1} << 10;
  static constexpr uint64_t kFlushToZero = uint64_t{1} << 11;
  static constexpr uint64_t kDenormalsAreZero = uint64_t{1} << 12;
  static constexpr uint64_t kGradMode = uint64_t{1} << 13;
  static constexpr int kThreadsShift = 16;
  static constexpr uint64_t kThreads = uint64_t{0xffff} << kThreadsShift;
  static constexpr int kQEngineShift = 32;
  static constexpr uint64_t kQEngine = uint64_t{0xff} << kQEngineShift;

  static OpContext current() {
    const at::Context& ctx = at::globalContext();
    uint64_t w = static_cast<uint8_t>(c10::get_default_dtype_as_scalartype());
    if (ctx.userEnabledMkldnn()) w |= kMkldnn;
    if (ctx.deterministicAlgorithms()) w |= kDeterministic;
    if (ctx.deterministicAlgorithmsWarnOnly()) w |= kWarnOnly;
    if (c10::GradMode::is_enabled()) w |= kGradMode;
    w |= static_cast<uint64_t>(std::min(at::get_num_threads(), 0xffff)) << kThreadsShift;
    w |= static_cast<uint64_t>(static_cast<uint8_t>(ctx.qEngine())) << kQEngineShift;
#if DTR_HAVE_MXCSR
    const unsigned csr = _mm_getcsr();
    if (csr & 0x8000) w |= kFlushToZero;
    if (csr & 0x0040) w |= kDenormalsAreZero;
#endif
    return OpContext{w};
  }

  c10::ScalarType default_dtype() const { return static_cast<c10::ScalarType>(word & 0xff); }
  int threads() const { return static_cast<int>((word & kThreads) >> kThreadsShift); }
  at::QEngine qengine() const {
    return static_cast<at::QEngine>((word & kQEngine) >> kQEngineShift);
  }
  OpContext with_threads(int n) const {
    return OpContext{(word & ~kThreads) | (static_cast<uint64_t>(n) << kThreadsShift)};
  }
  bool operator==(OpContext other) const { return word == other.word; }
  bool operator!=(OpContext other) const { return word != other.word; }
};

// Sets `recorded` for its lifetime where the current context differs, and puts the current
// one back after. Each part is set only if it differs, so a remat in an unchanged context
// (every remat of a program that never changes these) costs the reads and one comparison.
// The thread count is raised only where `raise_threads` (Note [Op context]).
class OpContextScope {
 public:
  OpContextScope(OpContext recorded, bool raise_threads) : saved_(OpContext::current()) {
    if (!raise_threads && recorded.threads() > saved_.threads())
      recorded = recorded.with_threads(saved_.threads());
    if (recorded != saved_) apply(recorded, saved_);
    applied_ = recorded;
  }
  ~OpContextScope() {
    if (applied_ != saved_) apply(saved_, applied_);
  }
  OpContextScope(const OpContextScope&) = delete;
  OpContextScope& operator=(const OpContextScope&) = delete;

 private:
  static void apply(OpContext to, OpContext from) {
    at::Context& ctx = at::globalContext();
    if (to.default_dtype() != from.default_dtype())
      c10::set_default_dtype(c10::scalarTypeToTypeMeta(to.default_dtype()));
    const uint64_t flags = OpContext::kMkldnn | OpContext::kDeterministic | OpContext::kWarnOnly;
    if ((to.word & flags) != (from.word & flags)) {
      ctx.setUserEnabledMkldnn((to.word & OpContext::kMkldnn) != 0);
      ctx.setDeterministicAlgorithms((to.word & OpContext::kDeterministic) != 0,
                                     (to.word & OpContext::kWarnOnly) != 0);
    }
    if ((to.word ^ from.word) & OpContext::kGradMode)
      c10::GradMode::set_enabled((to.word & OpContext::kGradMode) != 0);
    if (to.threads() != from.threads()) torch_compat::set_intra_op_threads_here(to.threads());
    if (to.qengine() != from.qengine()) ctx.setQEngine(to.qengine());
#if DTR_HAVE_MXCSR
    const uint64_t fp = OpContext::kFlushToZero | OpContext::kDenormalsAreZero;
    if ((to.word & fp) != (from.word & fp)) {
      unsigned csr = _mm_getcsr() & ~0x8040u;
      if (to.word & OpContext::kFlushToZero) csr |= 0x8000;
      if (to.word & OpContext::kDenormalsAreZero) csr |= 0x0040;
      _mm_setcsr(csr);
    }
#endif
  }

  OpContext saved_;
  OpContext applied_;
};

}  // namespace dtr::torch_integration
