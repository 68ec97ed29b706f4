// mapped_file.h — a read-only memory mapping of a whole file (POSIX mmap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lio {

/// Owns a read-only mmap of a file for its lifetime. Empty files map to a null span.
class MappedFile {
 public:
  /// Maps `path` read-only. Throws InvalidArgument("cannot open model file '<path>': <reason>")
  /// when it does not exist or cannot be read.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// Start of the mapping; nullptr for an empty file.
  const std::byte* data() const { return data_; }
  /// Length of the file in bytes.
  int64_t size_bytes() const { return size_bytes_; }
  /// Path the file was opened from.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  int64_t size_bytes_ = 0;
};

}  // namespace lio
