// preload_shim.cpp: libdtr_preload.so, what LD_PRELOAD holds for the children of a
// process dtr runs in (Note [Preload shim] in process_kind.cpp). No torch header and no
// dtr library: loading it into a `true` or a shell costs next to nothing. Its initializer
// dlopens the libdtr_torch.so in its own directory, only in a process that can run
// PyTorch ops (Note [Wrapper processes]), and that library's initializer does the rest.
// Preloading the shim by hand works too: LD_PRELOAD=build/lib/libdtr_preload.so.
#include <dlfcn.h>
#include <stdlib.h>

#include <cstdio>
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

__attribute__((constructor)) void dtr_preload_initializer() {
  if (!dtr::torch_integration::can_run_torch_ops()) return;
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

}  // namespace
