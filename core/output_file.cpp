// output_file.cpp: Note [Output files] in include/dtr/core/output_file.h.
#include "dtr/core/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
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
