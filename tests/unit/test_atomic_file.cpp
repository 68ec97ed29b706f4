// AtomicFileWriter (lio/atomic_file.h): a file appears whole or not at all. A child process
// killed with SIGKILL in the middle of a write leaves the target absent (or its old contents
// whole) and only a temporary carrying its pid; an exception before commit() leaves nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "lio/atomic_file.h"
#include "lio/error.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lio_atomic_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  /// Files in the directory other than `except`.
  std::vector<std::string> others(const fs::path& except) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path() != except) out.push_back(e.path().filename().string());
    return out;
  }
  fs::path dir_;
};

TEST_F(AtomicFile, CommitWritesTheWholeFileAndNoTemporaryStays) {
  const fs::path p = dir_ / "out.bin";
  lio::write_file_atomically(p, std::string(100000, 'x'));
  EXPECT_EQ(slurp(p), std::string(100000, 'x'));
  EXPECT_TRUE(others(p).empty());
  lio::write_file_atomically(p, "new");  // replaces an existing file
  EXPECT_EQ(slurp(p), "new");
  EXPECT_TRUE(others(p).empty());
}

TEST_F(AtomicFile, AnExceptionBeforeCommitLeavesTheOldFileAndNoTemporary) {
  const fs::path p = dir_ / "out.bin";
  lio::write_file_atomically(p, "old contents");
  try {
    lio::AtomicFileWriter w(p);
    w.stream() << "half of the new";
    throw std::runtime_error("the writer failed half-way");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(p), "old contents");
  EXPECT_TRUE(others(p).empty()) << "the temporary was not removed";
}

TEST_F(AtomicFile, AKillMidWriteLeavesNoHalfFile) {
  for (const bool existed : {false, true}) {
    SCOPED_TRACE(existed ? "over an existing file" : "a new file");
    const fs::path p = dir_ / (existed ? "existing.bin" : "new.bin");
    if (existed) lio::write_file_atomically(p, "old contents");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // write 8 MiB of a 16 MiB file, flushed to the disk, then die
      lio::AtomicFileWriter w(p);
      const std::string mib(1 << 20, 'y');
      for (int i = 0; i < 8; ++i) w.stream() << mib;
      w.stream().flush();
      ::kill(::getpid(), SIGKILL);
      ::_exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    if (existed) {
      EXPECT_EQ(slurp(p), "old contents");
    } else {
      EXPECT_FALSE(fs::exists(p)) << "a half-written file appeared at the target";
    }
    // What the kill left: only the temporary, named after the target and the dead writer's pid.
    bool found = false;
    for (const std::string& f : others(p)) {
      if (f.rfind(p.filename().string() + ".tmp-" + std::to_string(child) + "-", 0) == 0) {
        found = true;
        EXPECT_EQ(fs::file_size(dir_ / f), std::uintmax_t{8} << 20);
        fs::remove(dir_ / f);
      }
    }
    EXPECT_TRUE(found) << "no temporary of the killed writer";
  }
}

TEST_F(AtomicFile, ADeviceIsWrittenInPlaceNeverReplaced) {
  lio::write_file_atomically("/dev/null", "discarded");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null is no longer a character device";
}

TEST_F(AtomicFile, AnUnwritablePathIsAClearError) {
  const fs::path p = dir_ / "no_such_dir" / "out.bin";
  try {
    lio::write_file_atomically(p, "x");
    FAIL() << "no error";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write '" + p.string() + "'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lio::write_file_atomically(dir_, "x"), lio::InvalidArgument);  // a directory
  EXPECT_TRUE(fs::is_directory(dir_));
}

}  // namespace
