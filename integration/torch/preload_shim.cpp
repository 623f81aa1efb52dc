// preload_shim.cpp: libdtr_preload.so, what LD_PRELOAD holds for the children of a
// process dtr runs in (Note [Preload shim] in process_kind.cpp). No torch header and no
// dtr library: loading it into a `true` or a shell costs next to nothing. It loads the
// libdtr_torch.so in its own directory, whose initializer does the rest, only in a process
// that can run PyTorch ops (Note [Wrapper processes]): in Python when torch is first
// imported (Note [Loading at import torch]), in a C++ program linked to libtorch at once.
// Preloading the shim by hand works too: LD_PRELOAD=build/lib/libdtr_preload.so.
//
// Note [Loading at import torch]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Loading libtorch takes 0.6 s here, and a Python child that never imports torch (a
// tool a training script runs, multiprocessing's resource tracker) need not pay it. So in
// Python the shim registers an audit hook (PySys_AddAuditHook, which may be called before
// the interpreter starts; Python 3.8 and later) and loads the library at the first
// "import" event for the module `torch`, which Python raises before it looks for the
// module: libtorch and dtr's allocator are in place before torch's first line runs, as
// under LD_PRELOAD. After that the hook returns at once (one string compare per audit
// event). Its symbols are looked up with dlsym, as the shim does not link libpython;
// where any is missing (an older Python) the library is loaded at once instead.
#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "integration/torch/process_kind.h"

namespace {

void dtr_preload_marker() {}

// The libdtr_torch.so next to this file.
std::string torch_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&dtr_preload_marker), &info) == 0 || !info.dli_fname)
    return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  path = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  return path + "libdtr_torch.so";
}

void load_torch_library() {
  const std::string library = torch_library_path();
  if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return;
  // The user asked for dtr (LD_PRELOAD names the shim): running on without it would be the
  // silent failure Note [Bad configuration] in runtime.cpp exists to prevent.
  const char* why = dlerror();
  std::fprintf(stderr,
               "dtr: libdtr_preload.so could not load %s (%s): it must sit beside "
               "libdtr_preload.so; rebuild the dtr_torch target or preload libdtr_torch.so "
               "itself\n",
               library.c_str(), why ? why : "unknown error");
  std::fflush(stderr);
  std::exit(2);
}

// Note [Loading at import torch]: Python's C API, found in the executable.
struct PythonApi {
  using AuditHook = int (*)(const char* event, void* args, void* user_data);
  int (*add_audit_hook)(AuditHook hook, void* user_data) = nullptr;
  void* (*tuple_get_item)(void* tuple, long index) = nullptr;
  const char* (*unicode_as_utf8)(void* text) = nullptr;
  void (*err_clear)() = nullptr;

  bool find() {
    add_audit_hook =
        reinterpret_cast<decltype(add_audit_hook)>(dlsym(RTLD_DEFAULT, "PySys_AddAuditHook"));
    tuple_get_item =
        reinterpret_cast<decltype(tuple_get_item)>(dlsym(RTLD_DEFAULT, "PyTuple_GetItem"));
    unicode_as_utf8 =
        reinterpret_cast<decltype(unicode_as_utf8)>(dlsym(RTLD_DEFAULT, "PyUnicode_AsUTF8"));
    err_clear = reinterpret_cast<decltype(err_clear)>(dlsym(RTLD_DEFAULT, "PyErr_Clear"));
    return add_audit_hook && tuple_get_item && unicode_as_utf8 && err_clear;
  }
};

PythonApi python;
std::atomic<bool> loaded{false};

// Called by Python, with the GIL held, for every audit event of the process.
int on_audit_event(const char* event, void* args, void*) {
  if (loaded.load(std::memory_order_relaxed) || std::strcmp(event, "import") != 0) return 0;
  void* module = python.tuple_get_item(args, 0);  // borrowed
  const char* name = module ? python.unicode_as_utf8(module) : nullptr;
  if (!name) {
    python.err_clear();  // a hook must not leave an exception behind
    return 0;
  }
  if (std::strcmp(name, "torch") != 0 && std::strncmp(name, "torch.", 6) != 0) return 0;
  loaded.store(true, std::memory_order_relaxed);
  load_torch_library();
  return 0;
}

__attribute__((constructor)) void dtr_preload_initializer() {
  using namespace dtr::torch_integration;
  // A program linked to libtorch (Python embedded in it or not) can run ops before any
  // `import torch`: it loads the library at once.
  if (executable_needs_torch()) return load_torch_library();
  if (!is_python_process()) return;  // Note [Wrapper processes]
  if (python.find() && python.add_audit_hook(&on_audit_event, nullptr) == 0) return;
  load_torch_library();  // no audit hooks: load it now, as under LD_PRELOAD
}

}  // namespace
