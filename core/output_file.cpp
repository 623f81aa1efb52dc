// output_file.cpp: Note [Output files] in include/dtr/core/output_file.h.
#include "dtr/core/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include <sys/stat.h>
#include <unistd.h>

namespace dtr {

namespace {

[[noreturn]] void fail(const std::string& path, std::string_view what, const std::string& why) {
  throw OutputError("dtr: cannot write " + std::string(what) + " '" + path + "': " + why);
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

void check_writable(const std::string& path, std::string_view what) {
  if (path.empty()) fail(path, what, "the path is empty");
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(path, what, "it is a directory; give a file's path");
    if (access(path.c_str(), W_OK) != 0)
      fail(path, what, std::string(std::strerror(errno)) + "; check its permissions");
    return;
  }
  const std::string dir = directory_of(path);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail(path, what, "the directory '" + dir + "' does not exist; create it first");
  if (access(dir.c_str(), W_OK) != 0)
    fail(path, what, "the directory '" + dir + "' is not writable (" + std::strerror(errno) + ")");
}

// Note [Outputs that are inputs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// check_writable says whether a path can be written, not whether writing it loses
// something. A probe of the tools (2026-12-07) found `dtr-sim run --trace in.log --timeline
// in.log` replace the trace it had just replayed, with status 0, and the same for every
// output flag of dtr-sim and dtr-plan and for DTR_TIMELINE; `sweep --csv F --svg F` kept
// only the plot. Two paths name one file when both exist and are one inode (links, `./`,
// `a/../`), or when neither exists and they are the same absolute path made lexically
// normal. A device such as /dev/null is left alone: writing it twice loses nothing.
namespace {

bool same_file(const std::string& a, const std::string& b, bool* regular) {
  struct stat sa, sb;
  const bool a_exists = stat(a.c_str(), &sa) == 0, b_exists = stat(b.c_str(), &sb) == 0;
  *regular = !(a_exists && !S_ISREG(sa.st_mode)) && !(b_exists && !S_ISREG(sb.st_mode));
  if (a_exists && b_exists) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (a_exists != b_exists) return false;
  std::error_code error;
  const std::filesystem::path pa = std::filesystem::absolute(a, error).lexically_normal();
  const std::filesystem::path pb = std::filesystem::absolute(b, error).lexically_normal();
  return !error && pa == pb;
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  bool regular = true;
  return same_file(a, b, &regular);
}

void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (const NamedPath& out : outputs)
    if (!out.path.empty()) check_writable(out.path, out.what);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    bool regular = true;
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && same_file(out.path, in.path, &regular) && regular)
        fail(out.path, out.what,
             "it is the " + in.what + " this command reads ('" + in.path +
                 "'), which writing it would destroy; give another path");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(out.path, outputs[j].path, &regular) && regular)
        fail(out.path, out.what,
             "the " + outputs[j].what + " is written there too ('" + outputs[j].path +
                 "'); give each its own path");
  }
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

int finish_standard_output(const char* tool, int status) {
  std::cout.flush();
  if (std::cout && std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  std::fprintf(stderr, "%s: cannot write standard output: %s\n", tool,
               std::strerror(errno != 0 ? errno : EIO));
  return status == 0 ? 2 : status;
}

void write_file(const std::string& path, std::string_view text, std::string_view what) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) fail(path, what, std::strerror(errno));
  const size_t written = std::fwrite(text.data(), 1, text.size(), file);
  const int write_errno = written == text.size() ? 0 : errno;
  const bool closed = std::fclose(file) == 0;  // a full disk shows here, at the flush
  if (written != text.size())
    fail(path, what, write_errno != 0 ? std::strerror(write_errno) : "a short write");
  if (!closed) fail(path, what, std::strerror(errno));
}

}  // namespace dtr
