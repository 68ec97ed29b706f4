// Chapter 08, Task 4: the bytes one decoder layer all-reduces and a ring sends per rank
// (exercises/08_tensor_parallel/tensor_parallel.cpp, layer_comm_volume).
#include <gtest/gtest.h>

#include <cstdint>

#include "lio/error.h"
#include "lio/tensor_parallel.h"

namespace {
using lio::layer_comm_volume;
using lio::LayerCommVolume;

// SmolLM2-135M's width; the engine's activations are f32.
constexpr int64_t kDModel = 576;
constexpr int64_t kF32 = 4;

TEST(Ch08Task4, OneSmolLmTokenAllReducesTwoActivations) {
  // After o_proj and after down_proj: 2 x 576 x 4 bytes.
  EXPECT_EQ(layer_comm_volume(1, kDModel, kF32, 3).all_reduce_bytes, 4608);
  EXPECT_EQ(layer_comm_volume(1, kDModel, 2, 3).all_reduce_bytes, 2304);  // fp16 activations
}

TEST(Ch08Task4, ARingOfThreeSendsFourThirdsPerRank) {
  // 2 (n - 1) / n = 4 / 3 of the 4,608 bytes: 6,144.
  const LayerCommVolume v = layer_comm_volume(1, kDModel, kF32, 3);
  EXPECT_DOUBLE_EQ(v.bytes_sent_per_rank, 4608.0 * 4 / 3);
  EXPECT_DOUBLE_EQ(v.bytes_sent_per_rank, 6144.0);
  EXPECT_DOUBLE_EQ(layer_comm_volume(1, kDModel, kF32, 2).bytes_sent_per_rank, 4608.0);      // 2 (1) / 2 = 1
  EXPECT_DOUBLE_EQ(layer_comm_volume(1, kDModel, kF32, 8).bytes_sent_per_rank, 4608.0 * 14 / 8);  // 8,064
}

TEST(Ch08Task4, OneRankSendsNothing) {
  EXPECT_DOUBLE_EQ(layer_comm_volume(1, kDModel, kF32, 1).bytes_sent_per_rank, 0.0);
  EXPECT_DOUBLE_EQ(layer_comm_volume(512, kDModel, kF32, 1).bytes_sent_per_rank, 0.0);
  EXPECT_DOUBLE_EQ(layer_comm_volume(1, kDModel, kF32, 2).bytes_sent_per_rank, 4608.0);
}

TEST(Ch08Task4, ScalesLinearlyWithTokens) {
  // A 512-token prefill chunk: 512 times one token's bytes.
  const LayerCommVolume one = layer_comm_volume(1, kDModel, kF32, 3);
  const LayerCommVolume chunk = layer_comm_volume(512, kDModel, kF32, 3);
  EXPECT_EQ(chunk.all_reduce_bytes, 512 * 4608);  // 2,359,296
  EXPECT_EQ(chunk.all_reduce_bytes, 512 * one.all_reduce_bytes);
  EXPECT_DOUBLE_EQ(chunk.bytes_sent_per_rank, 512 * 6144.0);  // 3,145,728
  EXPECT_EQ(layer_comm_volume(0, kDModel, kF32, 3).all_reduce_bytes, 0);
  EXPECT_DOUBLE_EQ(layer_comm_volume(0, kDModel, kF32, 3).bytes_sent_per_rank, 0.0);
}

TEST(Ch08Task4, RejectsBadInputs) {
  EXPECT_EQ(layer_comm_volume(2, kDModel, kF32, 3).all_reduce_bytes, 2 * 4608);
  EXPECT_THROW(layer_comm_volume(-1, kDModel, kF32, 3), lio::InvalidArgument);
  EXPECT_THROW(layer_comm_volume(1, 0, kF32, 3), lio::InvalidArgument);
  EXPECT_THROW(layer_comm_volume(1, kDModel, 0, 3), lio::InvalidArgument);
  EXPECT_THROW(layer_comm_volume(1, kDModel, kF32, 0), lio::InvalidArgument);
  EXPECT_THROW(layer_comm_volume(1, kDModel, kF32, -2), lio::InvalidArgument);
}

}  // namespace
