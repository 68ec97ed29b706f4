// mpi_test_main.cpp — main() for GoogleTest programs that run under mpirun (chapter 08): every
// rank runs every test; rank 0 prints GoogleTest's report, the others print only their failed
// assertions ("[rank k] Suite.Test: file:line: message"); every rank exits non-zero when any rank
// failed, so mpirun and ctest report it. Without mpirun it runs as one rank.
#include <mpi.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "lio/communicator.h"
#include "lio/error.h"

namespace {

/// On ranks other than 0: prints failed assertions with the rank, so a failure there is not
/// silent, without a second GoogleTest report. (The test's name is kept from OnTestStart:
/// UnitTest::current_test_info() would wait on the lock GoogleTest holds while it reports.)
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    lio::init_parallel(&argc, &argv);  // MPI_Init when started by mpirun; nothing otherwise
  } catch (const lio::Error& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
  // mpirun hands each rank a pseudo-terminal: without this, rank 0's report would carry colour
  // codes into ctest's log (and into expect_stub_failure.sh's grep). --gtest_color still wins.
  if (lio::launched_by_mpi()) GTEST_FLAG_SET(color, "no");
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = lio::world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  if (lio::mpi_active()) MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  lio::finalize_parallel();
  return failed;
}
