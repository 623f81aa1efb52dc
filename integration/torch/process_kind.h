// process_kind.h: which processes the PyTorch integration starts in, shared by
// libdtr_torch.so and the torch-free preload shim libdtr_preload.so (Note [Wrapper
// processes] and Note [Preload shim] in process_kind.cpp). No torch header, no dtr
// library: the shim links only libc and libdl.
#pragma once

#include <string>

namespace dtr::torch_integration {

// Whether this process can run PyTorch ops: a Python interpreter, or an executable whose
// own DT_NEEDED entries name libtorch or libc10 (Note [Wrapper processes]).
bool can_run_torch_ops();
// The two halves of can_run_torch_ops(): Python's Py_IsInitialized is in the global scope;
// the executable's own DT_NEEDED entries name libtorch or libc10.
bool is_python_process();
bool executable_needs_torch();

// The Python C API functions the library calls, looked up in the process once (dlsym:
// neither library links libpython), each null where the process holds no Python. Only
// is_initialized may be called before Python is up; the others need it up, and all but
// is_initialized, gil_ensure and this_thread_state need the GIL.
struct PythonApi {
  int (*is_initialized)() = nullptr;         // Py_IsInitialized
  int (*gil_ensure)() = nullptr;             // PyGILState_Ensure (its enum as an int)
  void (*gil_release)(int) = nullptr;        // PyGILState_Release
  void* (*this_thread_state)() = nullptr;    // PyGILState_GetThisThreadState
  int (*run_string)(const char*) = nullptr;  // PyRun_SimpleString
  int (*at_exit)(void (*)()) = nullptr;      // Py_AtExit
};
const PythonApi& python_api();

// LD_PRELOAD's entries (separated by colons or spaces, ld.so(8)) with every one that is
// the file `self` (compared after realpath) replaced by `replacement`, or dropped where
// `replacement` is empty; an entry equal to `replacement` already there is kept once.
// Returns the new value ("" = unset the variable).
// Whether one of LD_PRELOAD's entries is the file `file` (compared after realpath).
bool preload_names(const std::string& preload, const std::string& file);

std::string replace_preload_entry(const std::string& preload, const std::string& self,
                                  const std::string& replacement);

}  // namespace dtr::torch_integration
