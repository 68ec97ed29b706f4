// Chapter 03, Task 1: memory for a parameter count at a bit width, and whether a model fits
// (exercises/03_quantization/memory.cpp). GB = 1e9 bytes, as the lecture table counts.
#include <gtest/gtest.h>

#include "lio/error.h"
#include "lio/quantization.h"

namespace {
using namespace lio;
constexpr int64_t kGB = 1000000000;

TEST(Ch03Task1, LectureTable7b13b70b) {
  // FP16 / INT8 / INT4: 2, 1 and 0.5 bytes per parameter.
  EXPECT_EQ(weight_bytes(7 * kGB, 16), 14 * kGB);
  EXPECT_EQ(weight_bytes(7 * kGB, 8), 7 * kGB);
  EXPECT_EQ(weight_bytes(7 * kGB, 4), 3500000000);
  EXPECT_EQ(weight_bytes(13 * kGB, 16), 26 * kGB);
  EXPECT_EQ(weight_bytes(13 * kGB, 8), 13 * kGB);
  EXPECT_EQ(weight_bytes(13 * kGB, 4), 6500000000);
  EXPECT_EQ(weight_bytes(70 * kGB, 16), 140 * kGB);
  EXPECT_EQ(weight_bytes(70 * kGB, 8), 70 * kGB);
  EXPECT_EQ(weight_bytes(70 * kGB, 4), 35 * kGB);
  EXPECT_EQ(weight_bytes(70 * kGB, 32), 280 * kGB);
}

TEST(Ch03Task1, BlockFormatsCountTheirScales) {
  // llama.cpp's blocks of 32: Q8_0 8.5, Q4_1 5.0, Q4_0 4.5 bits per weight.
  EXPECT_EQ(weight_bytes(7 * kGB, 8.5), 7437500000);
  EXPECT_EQ(weight_bytes(7 * kGB, 4.5), 3937500000);
  EXPECT_EQ(weight_bytes(32, 5.0), 20);   // one Q4_1 block
  EXPECT_EQ(weight_bytes(32, 8.5), 34);   // one Q8_0 block
  EXPECT_EQ(weight_bytes(3, 4), 2);       // 12 bits round up to 2 bytes
  EXPECT_EQ(weight_bytes(0, 4), 0);
  EXPECT_EQ(weight_bytes(134515008, 32), 538060032);  // SmolLM2-135M at f32
}

TEST(Ch03Task1, DoesA13bModelFitIn16GB) {
  // Exercise 3 of the lecture: 16 GB of RAM, 2 GB for the OS, KV cache and activations.
  EXPECT_FALSE(model_fits(13 * kGB, 16, 2 * kGB, 16 * kGB));  // 26 + 2 > 16
  EXPECT_TRUE(model_fits(13 * kGB, 8, 2 * kGB, 16 * kGB));    // 13 + 2 <= 16
  EXPECT_TRUE(model_fits(13 * kGB, 4, 2 * kGB, 16 * kGB));    // 6.5 + 2
  EXPECT_FALSE(model_fits(13 * kGB, 8, 4 * kGB, 16 * kGB));   // 13 + 4 > 16
  EXPECT_TRUE(model_fits(13 * kGB, 8, 3 * kGB, 16 * kGB));    // exactly 16: fits
  EXPECT_FALSE(model_fits(70 * kGB, 4, 0, 16 * kGB));         // 35 GB even at 4 bits
}

TEST(Ch03Task1, LectureScenarioCFits45SequencesNot60) {
  // Lecture note 001, exercise 3, scenario C: a 13B model at 4 bits on 2 x A100 80 GB "runs a
  // batch of ~60 sequences". With Llama-2-13B's shape (40 layers, 40 KV heads, head_dim 128),
  // fp16 K and V and 4,096-token sequences, each sequence caches
  //   2 x 40 x 40 x 128 x 2 bytes = 819,200 bytes per token, x 4096 = 3,355,443,200 bytes,
  // and the KV cache of n sequences is the overhead beside the weights.
  constexpr int64_t kv_per_seq_f16 = int64_t{2} * 40 * 40 * 128 * 2 * 4096;
  EXPECT_EQ(kv_per_seq_f16, 3355443200);
  const int64_t budget = 160 * kGB;
  EXPECT_TRUE(model_fits(13 * kGB, 4, 45 * kv_per_seq_f16, budget));   // 6.5 + 151.0 GB
  EXPECT_FALSE(model_fits(13 * kGB, 4, 46 * kv_per_seq_f16, budget));  // 6.5 + 154.4 GB
  EXPECT_FALSE(model_fits(13 * kGB, 4, 60 * kv_per_seq_f16, budget));  // the note's ~60
  // FP16 weights leave room for 39: 4-bit weights buy 6 sequences.
  EXPECT_TRUE(model_fits(13 * kGB, 16, 39 * kv_per_seq_f16, budget));
  EXPECT_FALSE(model_fits(13 * kGB, 16, 40 * kv_per_seq_f16, budget));
  // An int8 KV cache with one f32 scale per (token, head) vector (lesson section 5) fits 88.
  constexpr int64_t kv_per_seq_int8 = int64_t{2} * 40 * 40 * (128 + 4) * 4096;
  EXPECT_TRUE(model_fits(13 * kGB, 4, 88 * kv_per_seq_int8, budget));
  EXPECT_FALSE(model_fits(13 * kGB, 4, 89 * kv_per_seq_int8, budget));
}

TEST(Ch03Task1, RejectsBadInput) {
  EXPECT_THROW(weight_bytes(-1, 4), InvalidArgument);
  EXPECT_THROW(weight_bytes(10, 0), InvalidArgument);
  EXPECT_THROW(weight_bytes(10, -4), InvalidArgument);
  EXPECT_THROW(weight_bytes(10, 65), InvalidArgument);
  EXPECT_THROW(model_fits(10, 4, -1, 100), InvalidArgument);
  EXPECT_THROW(model_fits(10, 4, 0, -1), InvalidArgument);
}

}  // namespace
