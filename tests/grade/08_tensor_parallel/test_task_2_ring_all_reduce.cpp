// Chapter 08, Task 2: the ring all-reduce over send_recv, graded against MPI_Allreduce
// (exercises/08_tensor_parallel/tensor_parallel.cpp, ring_all_reduce).
//
// Runs as an MPI job: ctest starts it as `scripts/mpirun.sh -n 3 <this binary>`; it also passes
// run by hand with one rank (plain, or under mpirun -n 1). Every rank runs every test; only
// rank 0 prints GoogleTest's report, the others print their failed assertions as "[rank k]"
// lines, and a test that fails on any rank fails on rank 0 and makes every rank exit 1.
// No ASSERT_* between collectives: a rank that left a test early would leave the others
// waiting in MPI.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lio/communicator.h"
#include "lio/error.h"
#include "lio/tensor_parallel.h"

namespace {
using lio::Communicator;
using lio::ring_all_reduce;

/// Passes send_recv through to the world and counts the floats this rank sent; any other call
/// throws, since the ring must be built from send_recv alone.
class SendRecvOnly final : public Communicator {
 public:
  explicit SendRecvOnly(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return "send_recv only (" + inner_.name() + ")"; }
  void all_reduce_sum(float*, int64_t) override { refuse("all_reduce_sum"); }
  void all_gather(const float*, float*, int64_t) override { refuse("all_gather"); }
  void broadcast(void*, int64_t, int) override { refuse("broadcast"); }
  void barrier() override { refuse("barrier"); }
  void send_recv(const float* send, int64_t n_send, int dest, float* recv, int64_t n_recv, int source) override {
    floats_sent += n_send;
    ++calls;
    inner_.send_recv(send, n_send, dest, recv, n_recv, source);
  }
  std::unique_ptr<Communicator> split(int, int) override {
    refuse("split");
    return nullptr;
  }
  int64_t floats_sent = 0;  ///< floats this rank passed to send_recv
  int64_t calls = 0;        ///< send_recv calls this rank made

 private:
  [[noreturn]] static void refuse(const char* call) {
    throw lio::Error(std::string("ring_all_reduce called Communicator::") + call + ": use send_recv only");
  }
  Communicator& inner_;
};

/// A small integer for element i on rank r (in [-8, 8], never all zero): any sum of them over a
/// few ranks is exact in float, whatever the order, so the ring must match MPI bit for bit.
float small_integer(int64_t i, int r) { return static_cast<float>((i * 7 + r * 13 + 3) % 17 - 8); }

/// The reference: MPI_Allreduce(MPI_SUM) of `local` when running under MPI; with one process
/// and no MPI the sum over one rank is the data itself.
std::vector<float> mpi_allreduce_sum(std::vector<float> local) {
  if (lio::mpi_active() && !local.empty()) {
    EXPECT_EQ(MPI_Allreduce(MPI_IN_PLACE, local.data(), static_cast<int>(local.size()), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD),
              MPI_SUCCESS);
  }
  return local;
}

/// Every rank's `mine`, rank 0's first (MPI_Allgather; a copy with one process).
std::vector<float> gather_all(const std::vector<float>& mine, int world_size) {
  std::vector<float> all(mine.size() * static_cast<size_t>(world_size));
  if (lio::mpi_active()) {
    EXPECT_EQ(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(),
                            static_cast<int>(mine.size()), MPI_FLOAT, MPI_COMM_WORLD),
              MPI_SUCCESS);
  } else {
    std::copy(mine.begin(), mine.end(), all.begin());
  }
  return all;
}

/// Each test gets the world; after it, the ranks agree on whether it passed: a failure on
/// rank k shows on rank 0 (which prints the report) as well.
class Ch08Task2 : public ::testing::Test {
 protected:
  void SetUp() override {
    world = lio::world_communicator();
    rank = world->rank();
    size = world->size();
  }
  void TearDown() override {
    int failed = HasFailure() ? 1 : 0;
    int ranks_failed = failed;
    if (lio::mpi_active()) MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (!failed && ranks_failed > 0) {
      ADD_FAILURE() << ranks_failed << " other rank(s) of " << size << " failed this test (their [rank k] lines above)";
    }
  }

  /// Runs the ring on small integers of length n and expects MPI_Allreduce's sum exactly, and
  /// the closed-form sum over ranks.
  void expect_exact_sum(int64_t n) {
    SCOPED_TRACE("n = " + std::to_string(n) + " over " + std::to_string(size) + " rank(s)");
    std::vector<float> data(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[static_cast<size_t>(i)] = small_integer(i, rank);
    const std::vector<float> want = mpi_allreduce_sum(data);
    ring_all_reduce(data.data(), n, *world);
    int64_t wrong = 0, first_wrong = -1;
    for (int64_t i = 0; i < n; ++i) {
      float closed_form = 0;
      for (int q = 0; q < size; ++q) closed_form += small_integer(i, q);
      const float got = data[static_cast<size_t>(i)];
      if (got != want[static_cast<size_t>(i)] || got != closed_form) {
        if (wrong++ == 0) first_wrong = i;
      }
    }
    EXPECT_EQ(wrong, 0) << "elements differ from MPI_Allreduce; the first is [" << first_wrong << "] = "
                        << (first_wrong >= 0 ? data[static_cast<size_t>(first_wrong)] : 0.0f) << ", want "
                        << (first_wrong >= 0 ? want[static_cast<size_t>(first_wrong)] : 0.0f)
                        << " (chunk " << (first_wrong >= 0 ? first_wrong / ((n + size - 1) / size) : -1) << ")";
  }

  std::unique_ptr<Communicator> world;
  int rank = 0;
  int size = 1;
};

TEST_F(Ch08Task2, ZeroElementsIsANoOp) {
  EXPECT_NO_THROW(ring_all_reduce(nullptr, 0, *world));
  std::vector<float> untouched{1.0f, 2.0f};
  EXPECT_NO_THROW(ring_all_reduce(untouched.data(), 0, *world));
  EXPECT_EQ(untouched, (std::vector<float>{1.0f, 2.0f}));
}

TEST_F(Ch08Task2, FewerElementsThanRanksLeaveChunksEmpty) {
  // 1 or 2 floats over 3 ranks: chunks of 1, and the last one or two are empty.
  expect_exact_sum(1);
  expect_exact_sum(2);
}

TEST_F(Ch08Task2, SevenElementsMakeAShortLastChunk) {
  expect_exact_sum(7);  // 3 ranks: chunks of 3, 3 and 1
}

TEST_F(Ch08Task2, LongMessagesMatchMpiAllreduceExactly) {
  expect_exact_sum(1000);    // 334, 334, 332
  expect_exact_sum(100003);  // prime: no rank count divides it
}

TEST_F(Ch08Task2, RandomFloatsMatchMpiAndEveryRankHoldsTheSameBits) {
  for (const int64_t n : {int64_t{7}, int64_t{100003}}) {
    SCOPED_TRACE("n = " + std::to_string(n) + " over " + std::to_string(size) + " rank(s)");
    std::mt19937 rng(20240808u + static_cast<unsigned>(rank));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> data(static_cast<size_t>(n)), magnitude(static_cast<size_t>(n));
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = dist(rng);
      magnitude[i] = std::fabs(data[i]);
    }
    const std::vector<float> want = mpi_allreduce_sum(data);
    // The scale of each sum: sum |x| over ranks (a sum near zero by cancellation still has it).
    const std::vector<float> scale = mpi_allreduce_sum(magnitude);
    ring_all_reduce(data.data(), n, *world);
    int64_t far = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      if (!(std::fabs(data[i] - want[i]) <= 1e-5f * scale[i])) {
        if (far++ < 3) ADD_FAILURE() << "[" << i << "] = " << data[i] << ", MPI_Allreduce gives " << want[i];
      }
    }
    EXPECT_EQ(far, 0) << "elements further than 1e-5 (relative to sum |x|) from MPI_Allreduce";
    // Bitwise the same on every rank: each chunk summed once, by one rank, then copied.
    const std::vector<float> all = gather_all(data, size);
    for (int q = 1; q < size; ++q) {
      const bool same = std::memcmp(all.data(), all.data() + static_cast<size_t>(q) * data.size(),
                                    data.size() * sizeof(float)) == 0;
      EXPECT_TRUE(same) << "rank " << q << " ended with other bits than rank 0";
    }
  }
}

TEST_F(Ch08Task2, SendsTwoTimesPMinusOneOverPOfTheDataThroughSendRecvOnly) {
  // Patarasuk & Yuan: p - 1 reduce-scatter and p - 1 all-gather steps, one chunk each: over all
  // ranks 2 (p - 1) n floats, each rank at most 2 (p - 1) ceil(n / p).
  const int64_t n = 1000;
  std::vector<float> data(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[static_cast<size_t>(i)] = small_integer(i, rank);
  SendRecvOnly counted(*world);
  ring_all_reduce(data.data(), n, counted);
  int64_t total = counted.floats_sent;
  if (lio::mpi_active()) {
    int64_t mine = counted.floats_sent;
    EXPECT_EQ(MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  }
  EXPECT_EQ(total, 2 * (size - 1) * n) << "floats sent by all ranks together";
  EXPECT_LE(counted.floats_sent, 2 * (size - 1) * ((n + size - 1) / size)) << "floats sent by rank " << rank;
  EXPECT_LE(counted.calls, 2 * (size - 1)) << "send_recv calls by rank " << rank;
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < size; ++q) want += small_integer(i, q);
    if (data[static_cast<size_t>(i)] != want) {
      ADD_FAILURE() << "[" << i << "] = " << data[static_cast<size_t>(i)] << ", want " << want;
      break;
    }
  }
}

TEST_F(Ch08Task2, RejectsANegativeCount) {
  std::vector<float> data{1.0f, 2.0f, 3.0f};
  EXPECT_THROW(ring_all_reduce(data.data(), -1, *world), lio::InvalidArgument);
  EXPECT_EQ(data, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  expect_exact_sum(3);  // and the ranks are still in step afterwards
}

}  // namespace

// main(): tests/support/mpi_test_main.cpp (MPI set up, rank 0 reports, every rank fails together).
