// Chapter 08, Task 3: one rank's weights, KV bytes per token and KV budget under tensor
// parallelism (exercises/08_tensor_parallel/tensor_parallel.cpp, tp_rank_memory).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "lio/error.h"
#include "lio/tensor_parallel.h"

namespace {
using lio::RankMemory;
using lio::tp_rank_memory;
using lio::TpMemoryInputs;

/// Lecture note 000's deployment: Llama 3.1 70B (70.6e9 parameters, 80 layers, 8 KV heads of
/// 128) in AWQ 4-bit with group size 128 — 4 bits per weight plus an fp16 scale and an fp16 zero
/// per 128 weights, 4 + 2 x 16 / 128 = 4.25 bits — on A100 40 GB cards (40e9 bytes), vLLM's
/// default gpu_memory_utilization 0.9, fp16 KV cache.
TpMemoryInputs llama_70b_awq_on_a100_40gb(int64_t tp_size) {
  TpMemoryInputs in;
  in.n_params = 70.6e9;
  in.bits_per_weight = 4.0 + 2.0 * 16.0 / 128.0;
  in.n_layers = 80;
  in.n_kv_heads = 8;
  in.head_dim = 128;
  in.kv_bytes_per_element = 2;
  in.gpu_bytes = 40e9;
  in.memory_utilization = 0.9;
  in.tp_size = tp_size;
  return in;
}

TEST(Ch08Task3, SeventyBInAwqDoesNotFitOneA100FortyGB) {
  const RankMemory m = tp_rank_memory(llama_70b_awq_on_a100_40gb(1));
  EXPECT_DOUBLE_EQ(m.weight_bytes, 70.6e9 * 4.25 / 8);  // 37.50625e9 bytes of weights
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 2.0 * 80 * 8 * 128 * 2);  // 327,680: K and V, 80 layers, 8 heads
  EXPECT_DOUBLE_EQ(m.kv_budget_bytes, 40e9 * 0.9 - 70.6e9 * 4.25 / 8);  // 36e9 usable: -1.50625e9
  EXPECT_LT(m.kv_budget_bytes, 0);
  EXPECT_EQ(m.max_kv_tokens, 0);
}

TEST(Ch08Task3, SeventyBInAwqFitsTwoA100sWithTpTwo) {
  const RankMemory m = tp_rank_memory(llama_70b_awq_on_a100_40gb(2));
  const double weights = 70.6e9 * 4.25 / 8 / 2;  // 18.753125e9 bytes per rank
  const double budget = 40e9 * 0.9 - weights;    // 17.246875e9 bytes
  EXPECT_DOUBLE_EQ(m.weight_bytes, weights);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 2.0 * 80 * 4 * 128 * 2);  // 163,840: 4 KV heads per rank
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 163840.0);
  EXPECT_DOUBLE_EQ(m.kv_budget_bytes, budget);
  EXPECT_EQ(m.max_kv_tokens, static_cast<int64_t>(std::floor(budget / 163840.0)));
  EXPECT_EQ(m.max_kv_tokens, 105266);  // 17,246,875,000 / 163,840 = 105,266.57
}

TEST(Ch08Task3, TpTwoHalvesTheWeightsAndTheKvPerToken) {
  const RankMemory one = tp_rank_memory(llama_70b_awq_on_a100_40gb(1));
  const RankMemory two = tp_rank_memory(llama_70b_awq_on_a100_40gb(2));
  EXPECT_DOUBLE_EQ(two.weight_bytes * 2, one.weight_bytes);
  EXPECT_DOUBLE_EQ(two.kv_bytes_per_token * 2, one.kv_bytes_per_token);
}

TEST(Ch08Task3, PastEightRanksKvHeadsAreReplicatedNotSplit) {
  // 8 KV heads: at TP 8 one head per rank; at TP 16 still one (each replicated on 2 ranks), so
  // the KV bytes per token stop shrinking while the weights keep halving.
  const RankMemory eight = tp_rank_memory(llama_70b_awq_on_a100_40gb(8));
  const RankMemory sixteen = tp_rank_memory(llama_70b_awq_on_a100_40gb(16));
  EXPECT_DOUBLE_EQ(eight.kv_bytes_per_token, 2.0 * 80 * 1 * 128 * 2);  // 40,960
  EXPECT_DOUBLE_EQ(sixteen.kv_bytes_per_token, 2.0 * 80 * 1 * 128 * 2);
  EXPECT_DOUBLE_EQ(sixteen.weight_bytes, 70.6e9 * 4.25 / 8 / 16);
  EXPECT_EQ(sixteen.max_kv_tokens, static_cast<int64_t>(std::floor((36e9 - 70.6e9 * 4.25 / 8 / 16) / 40960.0)));
}

TEST(Ch08Task3, SmolLmInF32FitsOneSmallCard) {
  // SmolLM2-135M: 134.5e6 parameters, 30 layers, 3 KV heads of 64, f32 weights and KV, on a
  // 1 GB card at utilization 1: 538 MB of weights, 46,080 KV bytes per token.
  TpMemoryInputs in;
  in.n_params = 134.5e6;
  in.bits_per_weight = 32;
  in.n_layers = 30;
  in.n_kv_heads = 3;
  in.head_dim = 64;
  in.kv_bytes_per_element = 4;
  in.gpu_bytes = 1e9;
  in.memory_utilization = 1.0;
  in.tp_size = 1;
  const RankMemory m = tp_rank_memory(in);
  EXPECT_DOUBLE_EQ(m.weight_bytes, 134.5e6 * 4);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 2.0 * 30 * 3 * 64 * 4);
  EXPECT_DOUBLE_EQ(m.kv_budget_bytes, 1e9 - 134.5e6 * 4);
  EXPECT_EQ(m.max_kv_tokens, static_cast<int64_t>(std::floor((1e9 - 134.5e6 * 4) / 46080.0)));  // 10,026
}

TEST(Ch08Task3, RejectsBadInputs) {
  EXPECT_GT(tp_rank_memory(llama_70b_awq_on_a100_40gb(4)).max_kv_tokens, 0);
  auto with = [](auto edit) {
    TpMemoryInputs in = llama_70b_awq_on_a100_40gb(2);
    edit(in);
    return in;
  };
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.tp_size = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.tp_size = 3; })), lio::InvalidArgument);  // 8 KV heads
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.n_params = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.bits_per_weight = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.n_layers = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.n_kv_heads = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.head_dim = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.kv_bytes_per_element = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.gpu_bytes = -40e9; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.memory_utilization = 0; })), lio::InvalidArgument);
  EXPECT_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.memory_utilization = 1.5; })), lio::InvalidArgument);
  EXPECT_NO_THROW(tp_rank_memory(with([](TpMemoryInputs& in) { in.memory_utilization = 1.0; })));
}

}  // namespace
