// Chapter 08, Task 1: which block of each weight a rank holds, and which KV heads
// (exercises/08_tensor_parallel/tensor_parallel.cpp, shard_linear and kv_heads_for_rank).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "lio/error.h"
#include "lio/tensor_parallel.h"

namespace {
using lio::KvHeadRange;
using lio::kv_heads_for_rank;
using lio::ParallelStyle;
using lio::shard_linear;
using lio::ShardSlice;

// SmolLM2-135M (models/SmolLM2-135M config): d_model 576, 9 query heads, 3 KV heads of 64,
// MLP width 1536. W is (out_features, in_features).
constexpr int64_t kDModel = 576;
constexpr int64_t kHeadDim = 64;
constexpr int64_t kKvDim = 3 * kHeadDim;  // 192
constexpr int64_t kDFf = 1536;

/// Every element of W (rows, cols) is held by exactly one of the tp_size ranks, each rank's
/// block lies inside W, the blocks are the same size, and the split dimension is cut in whole
/// units.
void expect_tiles_exactly_once(int64_t rows, int64_t cols, ParallelStyle style, int64_t unit, int64_t tp_size) {
  std::vector<int> held(static_cast<size_t>(rows * cols), 0);
  for (int64_t r = 0; r < tp_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(tp_size));
    const ShardSlice s = shard_linear(rows, cols, style, unit, tp_size, r);
    EXPECT_EQ(s.n_rows() * s.n_cols(), rows * cols / tp_size);
    if (style == ParallelStyle::Column) {
      EXPECT_EQ(s.n_cols(), cols) << "a column-parallel rank keeps every input feature";
      EXPECT_EQ(s.row_begin % unit, 0) << "a unit (head) cut in two";
    } else {
      EXPECT_EQ(s.n_rows(), rows) << "a row-parallel rank keeps every output feature";
      EXPECT_EQ(s.col_begin % unit, 0) << "a unit (head) cut in two";
    }
    const bool inside = s.row_begin >= 0 && s.row_begin <= s.row_end && s.row_end <= rows && s.col_begin >= 0 &&
                        s.col_begin <= s.col_end && s.col_end <= cols;
    EXPECT_TRUE(inside) << "rows [" << s.row_begin << ", " << s.row_end << ") cols [" << s.col_begin << ", "
                        << s.col_end << ") outside (" << rows << ", " << cols << ")";
    if (!inside) continue;
    for (int64_t i = s.row_begin; i < s.row_end; ++i) {
      for (int64_t j = s.col_begin; j < s.col_end; ++j) ++held[static_cast<size_t>(i * cols + j)];
    }
  }
  const auto not_once = std::count_if(held.begin(), held.end(), [](int n) { return n != 1; });
  EXPECT_EQ(not_once, 0) << "elements of (" << rows << ", " << cols << ") held by zero or several ranks";
}

TEST(Ch08Task1, SmolLmQkvAreSplitByHeadsAtTpThree) {
  // Column-parallel Q, K, V: rank r computes query heads 3r..3r+2 and KV head r.
  for (int64_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(shard_linear(kDModel, kDModel, ParallelStyle::Column, kHeadDim, 3, r),
              (ShardSlice{192 * r, 192 * r + 192, 0, kDModel}));  // q_proj (576, 576)
    EXPECT_EQ(shard_linear(kKvDim, kDModel, ParallelStyle::Column, kHeadDim, 3, r),
              (ShardSlice{64 * r, 64 * r + 64, 0, kDModel}));  // k_proj, v_proj (192, 576)
    EXPECT_EQ(kv_heads_for_rank(3, 3, r), (KvHeadRange{r, r + 1}));
  }
}

TEST(Ch08Task1, SmolLmOutputAndDownProjectionsAreRowSplit) {
  for (int64_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    // o_proj (576, 576) reads the 3 heads' outputs this rank computed: its columns 192r..
    EXPECT_EQ(shard_linear(kDModel, kDModel, ParallelStyle::Row, kHeadDim, 3, r),
              (ShardSlice{0, kDModel, 192 * r, 192 * r + 192}));
    // gate_proj, up_proj (1536, 576) column-split; down_proj (576, 1536) row-split to match.
    EXPECT_EQ(shard_linear(kDFf, kDModel, ParallelStyle::Column, 1, 3, r),
              (ShardSlice{512 * r, 512 * r + 512, 0, kDModel}));
    EXPECT_EQ(shard_linear(kDModel, kDFf, ParallelStyle::Row, 1, 3, r),
              (ShardSlice{0, kDModel, 512 * r, 512 * r + 512}));
  }
}

TEST(Ch08Task1, OnlyTheSplitDimensionMustDivide) {
  // Column cuts rows only: 100 input features are fine; Row cuts cols only: 100 outputs are fine.
  EXPECT_EQ(shard_linear(kDModel, 100, ParallelStyle::Column, kHeadDim, 3, 2), (ShardSlice{384, 576, 0, 100}));
  EXPECT_EQ(shard_linear(100, kDFf, ParallelStyle::Row, 1, 3, 0), (ShardSlice{0, 100, 0, 512}));
  // TP 1 holds the whole matrix.
  EXPECT_EQ(shard_linear(kDModel, kDFf, ParallelStyle::Row, 1, 1, 0), (ShardSlice{0, kDModel, 0, kDFf}));
}

TEST(Ch08Task1, EveryRanksSlicesTileEachMatrixExactlyOnce) {
  for (const int64_t tp : {1, 3}) {
    SCOPED_TRACE("SmolLM2 at TP " + std::to_string(tp));
    expect_tiles_exactly_once(kDModel, kDModel, ParallelStyle::Column, kHeadDim, tp);  // q_proj
    expect_tiles_exactly_once(kKvDim, kDModel, ParallelStyle::Column, kHeadDim, tp);   // k_proj, v_proj
    expect_tiles_exactly_once(kDModel, kDModel, ParallelStyle::Row, kHeadDim, tp);     // o_proj
    expect_tiles_exactly_once(kDFf, kDModel, ParallelStyle::Column, 1, tp);            // gate, up
    expect_tiles_exactly_once(kDModel, kDFf, ParallelStyle::Row, 1, tp);               // down
  }
  // The tiny model (8 query heads of 4, d_model 32, MLP 48) at TP 2, 4, 8.
  for (const int64_t tp : {2, 4, 8}) {
    SCOPED_TRACE("tiny at TP " + std::to_string(tp));
    expect_tiles_exactly_once(32, 32, ParallelStyle::Column, 4, tp);
    expect_tiles_exactly_once(32, 32, ParallelStyle::Row, 4, tp);
    expect_tiles_exactly_once(48, 32, ParallelStyle::Column, 1, tp);
    expect_tiles_exactly_once(32, 48, ParallelStyle::Row, 1, tp);
  }
}

TEST(Ch08Task1, KvHeadsSplitWhileRanksAreFewerThanHeads) {
  // 8 query heads, 2 KV heads: TP 1 holds both, TP 2 one each.
  EXPECT_EQ(kv_heads_for_rank(2, 1, 0), (KvHeadRange{0, 2}));
  EXPECT_EQ(kv_heads_for_rank(2, 2, 0), (KvHeadRange{0, 1}));
  EXPECT_EQ(kv_heads_for_rank(2, 2, 1), (KvHeadRange{1, 2}));
  // Llama 3.1 70B's 8 KV heads at TP 2: four contiguous heads each.
  EXPECT_EQ(kv_heads_for_rank(8, 2, 1), (KvHeadRange{4, 8}));
}

TEST(Ch08Task1, KvHeadsAreReplicatedWhenRanksOutnumberThem) {
  // 2 KV heads at TP 4: ranks 0, 1 hold head 0, ranks 2, 3 head 1; at TP 8 rank r holds r / 4.
  const KvHeadRange expect4[] = {{0, 1}, {0, 1}, {1, 2}, {1, 2}};
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(kv_heads_for_rank(2, 4, r), expect4[r]) << "TP 4, rank " << r;
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(kv_heads_for_rank(2, 8, r), (KvHeadRange{r / 4, r / 4 + 1})) << "TP 8, rank " << r;
  }
}

TEST(Ch08Task1, EachRankHoldsTheKvHeadsItsQueryHeadsRead) {
  // Query head h reads KV head h / (n_heads / n_kv_heads): the KV heads a rank holds must
  // include every one its column-parallel slice of q_proj reads (tiny: 8 heads of 4, 2 KV heads;
  // SmolLM2: 9 heads of 64, 3 KV heads).
  for (const auto& [n_heads, n_kv_heads, head_dim, tps] :
       {std::tuple{int64_t{8}, int64_t{2}, int64_t{4}, std::vector<int64_t>{1, 2, 4, 8}},
        std::tuple{int64_t{9}, int64_t{3}, int64_t{64}, std::vector<int64_t>{1, 3}}}) {
    const int64_t group = n_heads / n_kv_heads;
    for (const int64_t tp : tps) {
      for (int64_t r = 0; r < tp; ++r) {
        const int64_t q_rows = n_heads * head_dim;  // q_proj is (n_heads x head_dim, d_model)
        const ShardSlice q = shard_linear(q_rows, q_rows, ParallelStyle::Column, head_dim, tp, r);
        const KvHeadRange kv = kv_heads_for_rank(n_kv_heads, tp, r);
        for (int64_t h = q.row_begin / head_dim; h < q.row_end / head_dim; ++h) {
          EXPECT_TRUE(h / group >= kv.begin && h / group < kv.end)
              << n_heads << " heads at TP " << tp << ": rank " << r << " computes query head " << h
              << ", which reads KV head " << h / group << ", but holds [" << kv.begin << ", " << kv.end << ")";
        }
      }
    }
  }
}

TEST(Ch08Task1, RejectsSplitsThatCutAHeadOrDoNotDivide) {
  EXPECT_EQ(shard_linear(kDModel, kDModel, ParallelStyle::Column, kHeadDim, 3, 0), (ShardSlice{0, 192, 0, kDModel}));
  // SmolLM2's 9 heads do not split over 2 ranks: 576 rows = 4.5 heads each.
  EXPECT_THROW(shard_linear(kDModel, kDModel, ParallelStyle::Column, kHeadDim, 2, 0), lio::InvalidArgument);
  EXPECT_THROW(shard_linear(kDModel, kDModel, ParallelStyle::Row, kHeadDim, 2, 1), lio::InvalidArgument);
  // ... nor the MLP's 1536 over 5.
  EXPECT_THROW(shard_linear(kDFf, kDModel, ParallelStyle::Column, 1, 5, 0), lio::InvalidArgument);
  EXPECT_THROW(shard_linear(kDModel, kDFf, ParallelStyle::Row, 1, 5, 0), lio::InvalidArgument);
  // 3 KV heads over 2 ranks, or over 4 (neither divides nor is a multiple).
  EXPECT_EQ(kv_heads_for_rank(3, 3, 2), (KvHeadRange{2, 3}));
  EXPECT_THROW(kv_heads_for_rank(3, 2, 0), lio::InvalidArgument);
  EXPECT_THROW(kv_heads_for_rank(3, 4, 0), lio::InvalidArgument);
}

TEST(Ch08Task1, RejectsBadRanksAndSizes) {
  EXPECT_EQ(shard_linear(32, 32, ParallelStyle::Row, 4, 8, 7), (ShardSlice{0, 32, 28, 32}));
  EXPECT_THROW(shard_linear(32, 32, ParallelStyle::Row, 4, 8, 8), lio::InvalidArgument);   // rank == tp_size
  EXPECT_THROW(shard_linear(32, 32, ParallelStyle::Row, 4, 8, -1), lio::InvalidArgument);  // negative rank
  EXPECT_THROW(shard_linear(32, 32, ParallelStyle::Row, 4, 0, 0), lio::InvalidArgument);   // no ranks
  EXPECT_THROW(shard_linear(0, 32, ParallelStyle::Column, 1, 1, 0), lio::InvalidArgument);  // no rows
  EXPECT_THROW(shard_linear(32, 0, ParallelStyle::Column, 1, 1, 0), lio::InvalidArgument);  // no cols
  EXPECT_THROW(shard_linear(32, 32, ParallelStyle::Column, 0, 1, 0), lio::InvalidArgument);  // no unit
  EXPECT_EQ(kv_heads_for_rank(2, 8, 7), (KvHeadRange{1, 2}));
  EXPECT_THROW(kv_heads_for_rank(2, 8, 8), lio::InvalidArgument);
  EXPECT_THROW(kv_heads_for_rank(2, 8, -1), lio::InvalidArgument);
  EXPECT_THROW(kv_heads_for_rank(2, 0, 0), lio::InvalidArgument);
  EXPECT_THROW(kv_heads_for_rank(0, 1, 0), lio::InvalidArgument);
}

}  // namespace
