// atomic_file.cpp — write to a temporary beside the target, fsync, rename.
#include "lio/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lio/error.h"

namespace lio {
namespace {

std::string temporary_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  // /dev/null, /dev/stdout, a FIFO: written in place. Renaming over a device node would replace
  // it with a regular file.
  struct stat st {};
  const bool special = ::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
  tmp_ = special ? path_ : temporary_name(path_);
  direct_ = special;
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) {
    throw InvalidArgument("cannot write '" + path_ + "': " + std::strerror(errno));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (out_.is_open()) out_.close();
  if (!direct_) std::remove(tmp_.c_str());
}

void AtomicFileWriter::commit() {
  if (committed_) throw InvalidArgument("AtomicFileWriter::commit called twice for '" + path_ + "'");
  out_.flush();
  const bool written = static_cast<bool>(out_);
  out_.close();
  auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    if (!direct_) std::remove(tmp_.c_str());
    throw InvalidArgument("cannot write '" + path_ + "': " + what + " (" + reason + ")");
  };
  if (!written || !out_) fail("write failed");
  if (direct_) {
    committed_ = true;
    return;
  }
  // The bytes reach the disk before the name does: after a power cut the new name never
  // points at a file whose data was still in the page cache.
  const int fd = ::open(tmp_.c_str(), O_RDONLY);
  if (fd < 0) fail("reopening the temporary file failed");
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) fail("fsync failed");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename failed");
  committed_ = true;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  w.commit();
}

}  // namespace lio
