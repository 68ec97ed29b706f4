// mapped_file.cpp — read-only POSIX mmap of a whole file.
#include "lio/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lio/error.h"

namespace lio {

namespace {

[[noreturn]] void throw_open_error(const std::string& path, const std::string& reason) {
  throw InvalidArgument("cannot open model file '" + path + "': " + reason);
}

// Closes the descriptor on every exit path; the mapping outlives it (POSIX mmap keeps
// its own reference to the file).
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_open_error(path, std::strerror(errno));
  FdGuard guard{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_open_error(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw_open_error(path, "is a directory");
  if (!S_ISREG(st.st_mode)) throw_open_error(path, "not a regular file");

  size_bytes_ = static_cast<int64_t>(st.st_size);
  if (size_bytes_ == 0) return;  // mmap of length 0 is an error; an empty file maps to null

  void* addr = ::mmap(nullptr, static_cast<size_t>(size_bytes_), PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) {
    throw_open_error(path, std::string("mmap failed: ") + std::strerror(errno));
  }
  data_ = static_cast<const std::byte*>(addr);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) {
    ::munmap(const_cast<std::byte*>(data_), static_cast<size_t>(size_bytes_));
  }
}

}  // namespace lio
