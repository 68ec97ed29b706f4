// atomic_file.h — files written whole or not at all (write to a temporary, then rename).
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace lio {

/// A file written atomically: the bytes go to a temporary file beside `path` (same directory,
/// so the rename stays on one filesystem), named `<path>.tmp-<pid>-<n>`; commit() flushes it,
/// fsyncs it and renames it over `path` (POSIX rename(2) replaces the name in one step). Until
/// commit() returns, `path` is untouched: absent, or its previous contents whole. A kill or a
/// crash mid-write therefore never leaves a half file at `path`; a SIGKILL can leave the
/// temporary behind (it carries the writer's pid), an exception or an early return removes it
/// (the destructor, when commit() was not reached). A `path` that exists and is neither a
/// regular file nor a directory (/dev/null, /dev/stdout, a FIFO) is written in place: there is
/// no half file to fear, and a rename would replace the device node.
///
/// Used by every program that writes a file: `lio quantize` / `convert` (GgufWriter,
/// SafetensorsWriter), `lio logits --out`, `lio batch --out / --summary`, the benchmarks'
/// results files.
class AtomicFileWriter {
 public:
  /// Opens the temporary file. Throws InvalidArgument naming `path` when it cannot be created
  /// (no such directory, no permission, `path` is a directory).
  explicit AtomicFileWriter(std::string path);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// The stream to write into (the temporary file, binary mode).
  std::ofstream& stream() { return out_; }
  /// The final path.
  const std::string& path() const { return path_; }
  /// Flushes and closes the temporary, fsyncs it, renames it to path(). Throws InvalidArgument
  /// if a write failed (disk full), or fsync or rename fails; then the temporary is removed and
  /// path() is as it was. Call once.
  void commit();

 private:
  std::string path_;
  std::string tmp_;
  std::ofstream out_;
  bool committed_ = false;
  bool direct_ = false;  ///< path is a device or FIFO: written in place, no rename
};

/// Writes `bytes` to `path` atomically (an AtomicFileWriter committed at once). Throws
/// InvalidArgument as AtomicFileWriter does.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace lio
