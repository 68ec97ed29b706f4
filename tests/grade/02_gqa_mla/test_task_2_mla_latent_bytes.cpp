// Chapter 02, Task 2: KV bytes per token of MHA, GQA, MQA and MLA (exercises/02_gqa_mla/gqa.cpp).
#include <gtest/gtest.h>

#include "lio/error.h"
#include "lio/gqa.h"

namespace {
using namespace lio;

AttentionShape smollm2(AttentionKind kind) {  // 30 layers, 9 heads of 64, 3 KV heads
  return {kind, 30, 9, 3, 64, 0, 0};
}

TEST(Ch02Task2, SmolLM2AtF16) {
  EXPECT_EQ(kv_bytes_per_token(smollm2(AttentionKind::GQA), 2), 23040);  // 2 x 30 x 3 x 64 x 2
  EXPECT_EQ(kv_bytes_per_token(smollm2(AttentionKind::MHA), 2), 69120);  // 3x: one per query head
  EXPECT_EQ(kv_bytes_per_token(smollm2(AttentionKind::MQA), 2), 7680);   // 1/3
}

TEST(Ch02Task2, SmolLM2AtF32IsTwiceF16) {
  EXPECT_EQ(kv_bytes_per_token(smollm2(AttentionKind::GQA), 4), 46080);  // what `lio info` reports
}

TEST(Ch02Task2, Llama2_70bAt4kTokens) {
  // 80 layers, 64 query heads of 128, 8 KV heads (GQA). f16, 4096 tokens:
  // GQA 1.25 GiB; MHA (64 KV heads, not 32) 10 GiB.
  const AttentionShape gqa{AttentionKind::GQA, 80, 64, 8, 128, 0, 0};
  AttentionShape mha = gqa;
  mha.kind = AttentionKind::MHA;
  EXPECT_EQ(kv_bytes_per_token(gqa, 2) * 4096, int64_t{1342177280});
  EXPECT_EQ(kv_bytes_per_token(mha, 2) * 4096, int64_t{10737418240});
}

TEST(Ch02Task2, DeepSeekV2MlaAgainstMha) {
  // DeepSeek-V2: 60 layers, 128 heads of 128, kv_lora_rank 512, RoPE key 64 (f16).
  const AttentionShape mha{AttentionKind::MHA, 60, 128, 128, 128, 0, 0};
  const AttentionShape mla{AttentionKind::MLA, 60, 128, 0, 0, 512, 64};
  EXPECT_EQ(kv_bytes_per_token(mha, 2), 3932160);  // x 4096 tokens = 16.1 GB
  EXPECT_EQ(kv_bytes_per_token(mla, 2), 69120);    // x 4096 tokens = 0.28 GB
}

TEST(Ch02Task2, MlaWithoutRopeKey) {
  const AttentionShape mla{AttentionKind::MLA, 2, 4, 0, 0, 96, 0};
  EXPECT_EQ(kv_bytes_per_token(mla, 4), 768);
}

TEST(Ch02Task2, RejectsBadShapes) {
  EXPECT_THROW(kv_bytes_per_token(smollm2(AttentionKind::GQA), 0), InvalidArgument);
  AttentionShape s = smollm2(AttentionKind::GQA);
  s.n_kv_heads = 0;
  EXPECT_THROW(kv_bytes_per_token(s, 2), InvalidArgument);
  const AttentionShape mla{AttentionKind::MLA, 60, 128, 0, 0, 0, 64};
  EXPECT_THROW(kv_bytes_per_token(mla, 2), InvalidArgument);
}

}  // namespace
