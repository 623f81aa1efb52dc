// output_file.cpp: Note [Output files] in include/dtr/core/output_file.h.
#include "dtr/core/output_file.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
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
  ReplacingFile file(path);
  if (!file) fail(path, what, std::strerror(errno));
  errno = 0;
  file.out().write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!file.commit())  // a full disk shows here, at the close
    fail(path, what, std::strerror(errno != 0 ? errno : EIO));
}

// Note [Whole or absent]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The live run writes its trace, timeline and snapshot at exit, and at SIGTERM (Note
// [Outputs at SIGTERM] in integration/torch/exit_writers.cpp); a scheduler that sent
// SIGTERM sends SIGKILL after its grace period (Kubernetes: 30 s by default), and a second
// SIGTERM ends the process at once. Written in place, a file cut short there kept its
// name: a trace cut between two events reads as a shorter trace with no warning (DTR's
// logs have no end marker). So an output is written to a new file beside it,
// PATH.dtr-PID-N (N counts the process's outputs, so two writers of one path do not
// share it; created exclusively, not through a link), and renamed onto PATH once closed:
// a reader finds the whole file or the old one (or none), and a killed run leaves only
// the new file beside the path. A link to a file is followed, so the file it names is
// replaced, not the link; an existing file's permission bits are kept (its owner and
// other hard links are not: the new file is a new inode). Written in place, as before:
//  - a path under /dev or /proc in any normal spelling (/dev/null, /dev/stdout,
//    /dev/fd/N), one that exists and is not a regular file (a pipe), and standard input,
//    output or error redirected to a file, however spelt (//dev/stdout, a link to it): a
//    rename would replace the device node, or the file the stream goes to;
//  - a link to nothing (the file it names is made, as before), and a file this process
//    may not write (the open fails, as before, where a rename would have replaced it);
//  - a path beside which nothing can be created (a writable file in a directory that is
//    not), and one the rename cannot replace (a file bind-mounted by itself in a
//    container: EBUSY; another user's file in a sticky directory): there the new file is
//    copied into the path, then removed; where that copy fails part way (a full disk),
//    the path is short and the whole output stays beside it.
// A name left beside the path by a killed run with the same pid is skipped for the next
// N. A disk that holds the new file and not also the old one fails the write, and the old
// file stays. A rename that fails for another reason (the new file was removed meanwhile)
// fails the commit and leaves the old file. No fsync: the guarantee is for a killed
// process, not a lost machine. Not guarded: a link swapped in for the new file's name
// between its exclusive creation and the stream's open by name, in a directory others may
// write and that is not sticky.
namespace {

// Whether `st` is the file of the process's standard input, output or error (a path such
// as //dev/stdout or a link to it, resolved to the file it is redirected to).
bool is_standard_stream(const struct stat& st) {
  for (int fd : {0, 1, 2}) {
    struct stat std_st;
    if (fstat(fd, &std_st) == 0 && std_st.st_dev == st.st_dev && std_st.st_ino == st.st_ino)
      return true;
  }
  return false;
}

}  // namespace

ReplacingFile::ReplacingFile(const std::string& path) : path_(path) {
  static std::atomic<uint64_t> outputs{0};
  struct stat st, link;
  const bool exists = stat(path.c_str(), &st) == 0;
  const bool linked = lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  const std::string normal = std::filesystem::path(path).lexically_normal().string();
  const bool special = path.empty() || normal.rfind("/dev/", 0) == 0 ||
                       normal.rfind("/proc/", 0) == 0 || (exists && is_standard_stream(st));
  const bool replace =
      !special && (exists ? S_ISREG(st.st_mode) && access(path.c_str(), W_OK) == 0 : !linked);
  if (replace) {
    std::error_code error;
    if (linked) path_ = std::filesystem::canonical(path, error).string();
    // A file left by a killed run of a process with this pid is not ours: the next name.
    for (int tries = 0; !error && tries < 64; ++tries) {
      beside_ = path_ + ".dtr-" + std::to_string(getpid()) + "-" + std::to_string(outputs++);
      const int fd =
          open(beside_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd < 0 && errno == EEXIST) continue;
      if (fd < 0) break;
      if (exists) fchmod(fd, st.st_mode & 07777);
      close(fd);
      out_.open(beside_, std::ios::binary | std::ios::trunc);
      if (out_) return;
      unlink(beside_.c_str());
      break;
    }
    beside_.clear();
    path_ = path;
  }
  out_.open(path_, std::ios::binary | std::ios::trunc);
}

ReplacingFile::~ReplacingFile() {
  if (!beside_.empty() && !committed_ && !kept_) {
    out_.close();
    unlink(beside_.c_str());
  }
}

namespace {

// Copies the file `from` into `to` in place; false (errno set) where that failed, and then
// `to` may be short, or untouched where `from` could not be read.
bool copy_into(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return false;
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!out) return false;
  std::vector<char> chunk(1 << 16);
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0)
    out.write(chunk.data(), in.gcount());
  out.close();
  return !in.bad() && static_cast<bool>(out);
}

// The errors of a rename that mean the path cannot be replaced, though it can be written:
// a file mounted by itself (EBUSY), another user's file in a sticky directory (EPERM,
// EACCES), a path on another file system than its directory's entry says (EXDEV).
bool cannot_replace(int error) {
  return error == EBUSY || error == EPERM || error == EACCES || error == EXDEV;
}

}  // namespace

bool ReplacingFile::commit() {
  if (out_) {  // else errno is still the failed write's, where nothing came since
    errno = 0;
    out_.flush();
  }
  const bool written = static_cast<bool>(out_);
  const int write_errno = errno;
  out_.close();
  if (!written || !out_) {
    if (write_errno != 0) errno = write_errno;
    return false;
  }
  if (beside_.empty() || std::rename(beside_.c_str(), path_.c_str()) == 0) {
    committed_ = true;
    return true;
  }
  // Note [Whole or absent]: a path the rename cannot replace is written in place.
  const int rename_errno = errno;
  if (!cannot_replace(rename_errno)) return false;  // the old file stays
  if (!copy_into(beside_, path_)) {
    kept_ = true;  // the whole output stays beside the path
    if (errno == 0) errno = rename_errno;
    return false;
  }
  return true;  // the destructor removes the new file
}

}  // namespace dtr
