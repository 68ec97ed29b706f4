// test_parallel_plan.cpp — chapter 08's bookkeeping without MPI: a batch cut into pipeline
// micro-batches keeps every row, slot, block table and logits row, re-based; the rank plan's
// pipeline stages cover the layers once; a tensor-parallel rank rounds its shard of a row-parallel
// input with per-token int8 activations on the whole row's grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "lio/communicator.h"
#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/parallel.h"
#include "tiny_model.h"

namespace lio {
namespace {

ForwardBatch three_sequences() {
  ForwardBatch b(4);
  b.add_sequence(std::vector<int32_t>{1, 2, 3, 4, 5}, 0, std::vector<int32_t>{0, 1}, 5);  // prefill, all logits
  b.add_sequence(std::vector<int32_t>{6}, 7, std::vector<int32_t>{2, 3});                 // decode
  b.add_sequence(std::vector<int32_t>{7, 8}, 2, std::vector<int32_t>{4}, 1);               // chunk
  return b;
}

TEST(SplitMicroBatches, KeepsEveryRowInOrder) {
  const ForwardBatch b = three_sequences();
  for (int64_t n : {1, 2, 3, 8}) {
    const std::vector<ForwardBatch> parts = split_micro_batches(b, n);
    ASSERT_EQ(static_cast<int64_t>(parts.size()), std::min<int64_t>(n, 3)) << n;
    std::vector<int32_t> tokens, slots, positions, logits_rows, tables;
    int32_t row0 = 0;
    for (const ForwardBatch& p : parts) {
      EXPECT_NO_THROW(p.validate(100, 64, 8));
      tokens.insert(tokens.end(), p.token_ids.begin(), p.token_ids.end());
      slots.insert(slots.end(), p.slot_mapping.begin(), p.slot_mapping.end());
      positions.insert(positions.end(), p.positions.begin(), p.positions.end());
      tables.insert(tables.end(), p.block_tables.begin(), p.block_tables.end());
      for (int32_t r : p.logits_rows) logits_rows.push_back(r + row0);
      row0 += static_cast<int32_t>(p.n_tokens());
    }
    EXPECT_EQ(tokens, b.token_ids);
    EXPECT_EQ(slots, b.slot_mapping);
    EXPECT_EQ(positions, b.positions);
    EXPECT_EQ(tables, b.block_tables);
    EXPECT_EQ(logits_rows, b.logits_rows);
  }
  EXPECT_THROW(split_micro_batches(b, 0), InvalidArgument);
}

TEST(SplitMicroBatches, BalancesRows) {
  ForwardBatch b(4);
  for (int i = 0; i < 8; ++i) b.add_sequence(std::vector<int32_t>{int32_t(i)}, 3, std::vector<int32_t>{i});
  const std::vector<ForwardBatch> parts = split_micro_batches(b, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].n_tokens(), 4);
  EXPECT_EQ(parts[1].n_tokens(), 4);
}

TEST(RankPlan, PipelineStagesCoverTheLayersOnce) {
  const std::string dir = testing::make_temp_dir("lio_plan");
  testing::TinyModelSpec spec;
  spec.n_layers = 7;
  testing::write_tiny_gguf(dir + "/m.gguf", spec);
  const LoadedModel m = load_model(dir + "/m.gguf", WeightMode::AsStored);
  for (int64_t pp : {1, 2, 3, 7}) {
    int64_t next = 0;
    for (int64_t r = 0; r < pp; ++r) {
      const RankPlan p = make_rank_plan(m.config, m.weights, {1, pp}, r);
      EXPECT_EQ(p.layer_begin, next);
      EXPECT_GE(p.layer_end - p.layer_begin, 7 / pp);
      next = p.layer_end;
    }
    EXPECT_EQ(next, 7) << "pp " << pp;
  }
  EXPECT_THROW(make_rank_plan(m.config, m.weights, {1, 8}, 0), InvalidArgument);
  EXPECT_THROW(make_rank_plan(m.config, m.weights, {0, 1}, 0), InvalidArgument);
}

// Each rank of a host takes its own GPU (one per rank: what NCCL needs); with fewer GPUs than
// ranks MPI's host-memory collectives may share them round-robin, NCCL may not.
TEST(CudaDeviceForRank, OneGpuPerLocalRankAndNcclRefusesSharing) {
  EXPECT_EQ(cuda_device_for_rank(0, 1, 1, true), 0);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cuda_device_for_rank(r, 4, 8, true), r);
  EXPECT_EQ(cuda_device_for_rank(3, 4, 2, false), 1);  // MPI: ranks 0, 2 on GPU 0; 1, 3 on GPU 1
  try {
    cuda_device_for_rank(1, 4, 2, true);
    FAIL() << "NCCL with 4 ranks on 2 GPUs was accepted";
  } catch (const UnsupportedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4 ranks"), std::string::npos) << what;
    EXPECT_NE(what.find("2 GPU"), std::string::npos) << what;
  }
  EXPECT_THROW(cuda_device_for_rank(0, 1, 0, false), UnsupportedError);  // no GPU
  EXPECT_THROW(cuda_device_for_rank(4, 4, 8, true), InvalidArgument);   // rank outside the host's
  EXPECT_THROW(cuda_device_for_rank(-1, 4, 8, true), InvalidArgument);
}

// Without mpirun the process is rank 0 of 1 on its host; Open MPI's environment is read when set.
TEST(LocalRank, FromTheLaunchersEnvironment) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("MPI_LOCALRANKID");
  unsetenv("MPI_LOCALNRANKS");
  EXPECT_EQ(local_rank(), 0);
  EXPECT_EQ(local_size(), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(local_rank(), 2);
  EXPECT_EQ(local_size(), 4);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // garbage: ignored
  EXPECT_EQ(local_rank(), 0);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

}  // namespace
// Issue 62: with --activations int8-token, each TP rank rounded its shard of W_o's and W_down's
// input at the shard's own max|x| / 127, so TP 3 sat further from f32 than one process. Here two
// shard backends, told the whole row's maximum (Backend::set_row_parallel_max, as the parallel
// runner does over the group), must give partial products that sum to one process's output up to
// float summation order; without the maximum (the old rounding) they differ by whole code steps,
// which shows this test can fail.
TEST(RowParallelInt8PerToken, ShardsRoundOnTheWholeRowsGrid) {
  const std::string dir = testing::make_temp_dir("lio_rowpar");
  testing::TinyModelSpec spec;
  spec.n_layers = 1;
  spec.weight_dtype = DType::Q8_0;
  spec.head_dim = 16;  // W_o's input: 4 heads x 16 = 64 features, 32 a rank (one block)
  testing::write_tiny_gguf(dir + "/m.gguf", spec);
  const LoadedModel full = load_model(dir + "/m.gguf", WeightMode::AsStored);
  constexpr int64_t kTp = 2, kRows = 3;
  CpuBackend one(full.config, full.weights, cpu::MatmulActivations::Int8PerToken);
  std::vector<LoadedModel> shards;
  for (int64_t r = 0; r < kTp; ++r) shards.push_back(shard_model(full, make_rank_plan(full.config, full.weights, {kTp, 1}, r)));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const WeightKind kind : {WeightKind::Wo, WeightKind::Down}) {
    const int64_t cols = kind == WeightKind::Wo ? spec.n_heads * spec.head_dim : spec.d_ff, part = cols / kTp;
    std::vector<float> x(static_cast<size_t>(kRows * cols));
    for (float& v : x) v = normal(rng);
    for (int64_t r = 0; r < kRows; ++r) x[static_cast<size_t>(r * cols + r % kTp * part + 3)] = 9.0f;  // one shard's outlier
    std::vector<float> row_max(static_cast<size_t>(kRows), 0.0f);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < cols; ++c) row_max[r] = std::max(row_max[r], std::fabs(x[static_cast<size_t>(r * cols + c)]));
    std::vector<float> y1(static_cast<size_t>(kRows * spec.d_model));
    one.matmul({kind, 0}, x.data(), y1.data(), kRows, false);
    for (const bool exchange : {true, false}) {
      std::vector<double> sum(y1.size(), 0.0);
      for (int64_t rank = 0; rank < kTp; ++rank) {
        CpuBackend be(shards[rank].config, shards[rank].weights, cpu::MatmulActivations::Int8PerToken);
        if (exchange) {
          be.set_row_parallel_max([&](float* m, int64_t n) {
            ASSERT_EQ(n, kRows);
            for (int64_t i = 0; i < n; ++i) m[i] = std::max(m[i], row_max[static_cast<size_t>(i)]);
          });
        }
        std::vector<float> xs(static_cast<size_t>(kRows * part)), ys(y1.size());
        for (int64_t r = 0; r < kRows; ++r)
          std::copy_n(x.begin() + r * cols + rank * part, part, xs.begin() + r * part);
        be.matmul({kind, 0}, xs.data(), ys.data(), kRows, false);
        for (size_t i = 0; i < ys.size(); ++i) sum[i] += ys[i];
      }
      double worst = 0.0, scale = 0.0;
      for (size_t i = 0; i < y1.size(); ++i) {
        worst = std::max(worst, std::fabs(sum[i] - y1[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(y1[i])));
      }
      if (exchange) {
        EXPECT_LT(worst, 1e-5 * scale) << (kind == WeightKind::Wo ? "W_o" : "W_down") << ": the shards' codes are not one process's";
      } else {
        EXPECT_GT(worst, 1e-3 * scale) << (kind == WeightKind::Wo ? "W_o" : "W_down") << ": each shard's own scale should round differently";
      }
    }
  }
}

}  // namespace lio
