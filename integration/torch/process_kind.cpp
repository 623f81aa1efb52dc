// process_kind.cpp: which processes the PyTorch integration starts in, and how LD_PRELOAD
// is passed on to their children (process_kind.h). Compiled into libdtr_torch.so and into
// the preload shim libdtr_preload.so (preload_shim.cpp); no torch header, no dtr library.
//
// Note [Wrapper processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// `LD_PRELOAD=libdtr_torch.so timeout 600 python3 train.py` (or time, nice, env, strace,
// perf, a shell) loads the library into the wrapper first. Dropping it from LD_PRELOAD
// there left the Python process without it: no budget, no report, and no word of it (a
// trace recorded under `timeout` came out empty, 2026-11-28). So the library starts only
// in a process that can run PyTorch ops: one with a Python interpreter (its
// Py_IsInitialized is in the global scope) or whose executable itself needs libtorch or
// libc10 (a C++ program built against libtorch). In any other process no allocator is
// installed and no option is read; the library only hands LD_PRELOAD to the shim (Note
// [Preload shim]), so the wrapper's children load libtorch only where they can run ops,
// or, where no shim sits beside it, leaves LD_PRELOAD as it was. dtr-run preloads the shim
// itself, so a wrapper or a shell it starts does not load libtorch at all (a process that
// loads libdtr_torch.so pays libtorch's load, 1.3 s here). torch.ops.load_library runs
// inside Python, so it always starts.
//
// Note [Preload shim]
// ~~~~~~~~~~~~~~~~~~~
// LD_PRELOAD is inherited by every child a script starts, and loading libtorch into a
// `/bin/true` took 1.3 s (ARCHITECTURE.md "Proven" 11), so the library must not stay in
// it. Until 2026-11-28 the initializer took it out, and with it every Python child lost
// dtr: a launcher (`torchrun`, `torch.multiprocessing.spawn`, a script that runs
// `python3 train.py` with subprocess) ran its workers with no budget, no report and no
// word of it. Now libdtr_torch.so hands LD_PRELOAD to a shim, libdtr_preload.so, built
// next to it: each of its own entries is replaced by the shim's path. The shim needs no
// torch and no dtr library, only libc, libdl and libstdc++ (it adds 0.75 ms to a `true`
// here). Only where can_run_torch_ops() holds does it dlopen the libdtr_torch.so beside
// it, whose initializer then starts as under LD_PRELOAD: in Python at the first `import
// torch`, before torch's first line runs (Note [Loading at import torch] in
// preload_shim.cpp), so a Python child that never imports torch loads nothing of it; in a
// C++ program linked to libtorch at once. The shim stays in LD_PRELOAD, so grandchildren
// get it too. Every process started this way reads the same DTR_CONF and gets its own
// budget, as a DDP worker gets its own GPU. Files a child writes get its pid (Note [Files
// of child processes] in runtime.cpp).
// DataLoader workers are forked, not exec'd: they keep the hook, with a copy of the
// allocator's state, and stay correct, as before. Where no shim sits beside the library
// the entries are dropped, as before, with a note on stderr.
#include "integration/torch/process_kind.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace dtr::torch_integration {

namespace {

bool same_file(const std::string& a, const std::string& b) {
  char real_a[PATH_MAX];
  char real_b[PATH_MAX];
  if (!realpath(a.c_str(), real_a) || !realpath(b.c_str(), real_b)) return a == b;
  return std::string(real_a) == std::string(real_b);
}

}  // namespace

// Note [Wrapper processes]: the executable's own DT_NEEDED entries name libtorch or libc10.
bool executable_needs_torch() {
  bool needs = false;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        const ElfW(Dyn)* dynamic = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dynamic =
                reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        if (!dynamic) return 1;  // static executable: nothing to read
        uintptr_t strtab = 0;
        for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d)
          if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
        if (strtab == 0) return 1;
        if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;  // not relocated in place
        for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
          if (d->d_tag != DT_NEEDED) continue;
          const std::string name = reinterpret_cast<const char*>(strtab + d->d_un.d_val);
          if (name.find("libtorch") != std::string::npos ||
              name.find("libc10") != std::string::npos)
            *static_cast<bool*>(data) = true;
        }
        return 1;  // the first object is the executable: stop there
      },
      &needs);
  return needs;
}

const PythonApi& python_api() {
  static const PythonApi api = [] {
    PythonApi found;
    auto look_up = [](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(RTLD_DEFAULT, name));
    };
    look_up(found.is_initialized, "Py_IsInitialized");
    look_up(found.gil_ensure, "PyGILState_Ensure");
    look_up(found.gil_release, "PyGILState_Release");
    look_up(found.this_thread_state, "PyGILState_GetThisThreadState");
    look_up(found.run_string, "PyRun_SimpleString");
    look_up(found.at_exit, "Py_AtExit");
    return found;
  }();
  return api;
}

bool is_python_process() { return python_api().is_initialized != nullptr; }

bool can_run_torch_ops() { return is_python_process() || executable_needs_torch(); }

namespace {

// Calls fn(entry) for each entry of an LD_PRELOAD value.
template <typename Fn>
void for_each_preload_entry(const std::string& preload, Fn fn) {
  size_t pos = 0;
  while (pos <= preload.size()) {
    size_t end = preload.find_first_of(": ", pos);
    if (end == std::string::npos) end = preload.size();
    const std::string entry = preload.substr(pos, end - pos);
    pos = end + 1;
    if (!entry.empty()) fn(entry);
  }
}

}  // namespace

bool preload_names(const std::string& preload, const std::string& file) {
  bool named = false;
  for_each_preload_entry(
      preload, [&](const std::string& entry) { named = named || same_file(entry, file); });
  return named;
}

std::string replace_preload_entry(const std::string& preload, const std::string& self,
                                  const std::string& replacement) {
  std::string kept;
  bool has_replacement = false;
  auto keep = [&](const std::string& entry) {
    if (!kept.empty()) kept += ' ';
    kept += entry;
  };
  for_each_preload_entry(preload, [&](const std::string& entry) {
    const bool is_self = !self.empty() && same_file(entry, self);
    const bool is_replacement = !replacement.empty() && same_file(entry, replacement);
    if (!is_self && !is_replacement) {
      keep(entry);
    } else if (!replacement.empty() && !has_replacement) {
      keep(replacement);
      has_replacement = true;
    }
  });
  return kept;
}

}  // namespace dtr::torch_integration
