// test_lecture_roofline.cpp — lecture note 003's roofline example (section 1.2, "메모리 병목 분석"):
// Llama-2-7B in fp16 on an A100 (2 TB/s, 312 dense fp16 TFLOP/s), batch 1. The note counts the
// weights as 12 d^2 per layer (Q, K, V, O: 4 d^2; SwiGLU's three matrices: 8 d^2) over 32 layers
// at 2 bytes each, 12.88 GB, and prints 155 tok/s bandwidth-bound against 12,107 tok/s
// compute-bound. The second number is off by 2x: it takes FLOPs per token = 2 x weight *bytes*,
// but a decode step does one multiply-add (2 FLOPs) per weight *parameter*, and an fp16 parameter
// is 2 bytes. Right: 2 x parameters, 24,214 tok/s. docs/01_kv_cache.md (section 1) prints these
// numbers; this test recomputes them, with the note's slip beside the correction.
#include <gtest/gtest.h>

#include <cstdint>

#include "lio/model_config.h"

namespace {

constexpr double kA100BandwidthBytesPerS = 2.0e12;  // the note's "2 TB/s" (A100 80GB SXM: 2.039)
constexpr double kA100Fp16FlopsPerS = 312e12;       // dense fp16 tensor cores, NVIDIA's datasheet
constexpr double kFp16Bytes = 2.0;

// Llama-2-7B's shape (its config.json): 32 layers, d_model 4096, d_ff 11008, vocab 32000.
lio::ModelConfig llama2_7b() {
  lio::ModelConfig c;
  c.n_layers = 32;
  c.d_model = 4096;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.head_dim = 128;
  c.d_ff = 11008;
  c.vocab_size = 32000;
  return c;
}

// The note's count: 12 d^2 per layer, no embedding, no LM head, no norms.
double note_params(const lio::ModelConfig& c) {
  return 12.0 * static_cast<double>(c.d_model) * static_cast<double>(c.d_model) * static_cast<double>(c.n_layers);
}

// Every matrix of the real model: Q, K, V, O (MHA, so each d x d), gate, up, down (d x d_ff),
// two RMSNorm vectors per layer, the final norm, the embedding and an untied LM head.
double full_params(const lio::ModelConfig& c) {
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff);
  const double kv_dim = static_cast<double>(c.n_kv_heads * c.head_dim);
  const double per_layer = d * d * 2 + d * kv_dim * 2 + 3 * d * ff + 2 * d;
  return per_layer * static_cast<double>(c.n_layers) + d + 2 * static_cast<double>(c.vocab_size) * d;
}

// Batch-1 decode reads every weight byte once per token, and does one multiply-add per parameter.
double bandwidth_bound_tok_s(double weight_bytes) { return kA100BandwidthBytesPerS / weight_bytes; }
double compute_bound_tok_s(double flops_per_token) { return kA100Fp16FlopsPerS / flops_per_token; }

TEST(LectureNote003Roofline, TheNotesWeightsAndBandwidthBound) {
  const double params = note_params(llama2_7b());
  const double weight_bytes = params * kFp16Bytes;
  EXPECT_DOUBLE_EQ(weight_bytes, 12884901888.0);  // 12.88 GB, as the note prints
  EXPECT_NEAR(bandwidth_bound_tok_s(weight_bytes), 155.2, 0.05);
}

TEST(LectureNote003Roofline, TheSlipTwoTimesBytesHalvesTheComputeBound) {
  const double params = note_params(llama2_7b());
  const double weight_bytes = params * kFp16Bytes;
  const double slipped = compute_bound_tok_s(2.0 * weight_bytes);  // the note: 2 x bytes
  const double right = compute_bound_tok_s(2.0 * params);          // 2 FLOPs per parameter
  EXPECT_NEAR(slipped, 12107.2, 0.05);
  EXPECT_NEAR(right, 24214.4, 0.05);
  EXPECT_DOUBLE_EQ(right / slipped, kFp16Bytes);
  // Compute-bound / bandwidth-bound = the batch at which decode would reach the ridge point
  // (312e12 / 2e12 = 156 FLOPs per byte; at batch B an fp16 weight byte serves B FLOPs).
  EXPECT_NEAR(right / bandwidth_bound_tok_s(weight_bytes), 156.0, 1e-9);
  EXPECT_NEAR(slipped / bandwidth_bound_tok_s(weight_bytes), 78.0, 1e-9);
}

TEST(LectureNote003Roofline, EveryWeightCountedLowersBothBoundsByFourPercent) {
  const double params = full_params(llama2_7b());
  EXPECT_NEAR(params / 1e9, 6.738, 0.001);  // Llama-2-7B's published 6.74B parameters
  EXPECT_NEAR(bandwidth_bound_tok_s(params * kFp16Bytes), 148.4, 0.05);
  EXPECT_NEAR(compute_bound_tok_s(2.0 * params), 23150.8, 0.05);
}

}  // namespace
