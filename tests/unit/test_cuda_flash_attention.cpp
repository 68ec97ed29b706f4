// test_cuda_flash_attention.cpp — chapter 07's CUDA attention kernels against references, on
// fresh random pools (fixed seeds, never zeros) with shuffled block tables:
//   cuda::flash_attention (f32, paged): query tiles at the edges (query_len 1, Br - 1, Br, Br + 1
//     for each GQA group), a 1000-row prefill after a cached prefix, decode rows up to 8192 keys
//     with and without Flash-Decoding's split, short verification chunks (query_len 2-4), mixed
//     prefill + decode batches, head_dim 64, 128 and 256 (Gemma 3's), GQA groups 1, 3, 4 and 8,
//     causal and not, and sliding windows (Gemma 3's local layers; chapter 04's paged kernels too);
//   cuda::naive_attention (its twin) on the same batches, head_dim 256 too;
//   cuda::flash_attention_bf16 (wmma) against a host f32 computation on the bf16-rounded inputs.
// References: causal outputs against lio::cpu::paged_attention_reference (f32, running max) and
// every output and lse against a double-precision host loop (non-causal outputs only there).
// Outputs and lse are poisoned (NaN) before each launch, so a row the kernel skips cannot pass.
// GPU tests skip without a usable GPU; the argument checks and the host-side rules (tile rows,
// split count, FLOPs) run everywhere.
//
// Tolerances: f32 outputs are convex combinations of V rows (|v| < 1): |got - want| <= 1e-4 x
// max(1, |want|), i.e. 1e-4 relative to the outputs' O(1) scale (f32 dot products of <= 128
// terms and expf, summed in other orders). lse likewise 1e-4 x max(1, |lse|). Split vs no split:
// 1e-5 by the same rule (the same scores, merged in another order). bf16: 2e-2 on outputs (P is
// rounded to bf16, ~2^-9 relative per weight, before P V); its lse is f32 from exact bf16
// products: 1e-3.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "cuda_check.h"
#include "flash_attention_cuda.h"
#include "flash_attention_mma.h"
#include "paged_attention.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "paged_layout.h"
#include "random_inputs.h"

namespace {

using lio::cuda::DeviceBuffer;
using lio::testing::random_floats;
// `cached` positions before `query_len` query rows, all in the pool (the kernels read K/V only there)
using lio::testing::SeqSpec;

struct Case {
  std::string name;
  int64_t n_heads, n_kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
};

/// The batch's layout (scattered block tables) and a random pool holding every position of
/// every sequence.
struct Batch : lio::testing::PagedLayout {
  int64_t kv_dim = 0;
  std::vector<float> q;               // (n_tokens, n_heads, head_dim)
  std::vector<float> k_pool, v_pool;  // (n_slots, kv_dim)
  float scale = 0.0f;
};

Batch make_batch(const Case& c, uint32_t seed) {
  Batch b;
  static_cast<lio::testing::PagedLayout&>(b) = lio::testing::scattered_layout(c.seqs, c.block_size, seed);
  b.kv_dim = c.n_kv_heads * c.head_dim;
  b.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  b.q = random_floats(static_cast<size_t>(b.n_tokens * c.n_heads * c.head_dim), -1.0f, 1.0f, seed + 1);
  b.k_pool = random_floats(static_cast<size_t>(b.n_slots * b.kv_dim), -1.0f, 1.0f, seed + 2);
  b.v_pool = random_floats(static_cast<size_t>(b.n_slots * b.kv_dim), -1.0f, 1.0f, seed + 3);
  return b;
}

/// out and lse of every (row, head) in double precision: causal (keys 0 .. p; with a sliding
/// window > 0 keys p - window + 1 .. p) or all keys.
void host_attention(const Case& c, const Batch& b, bool causal, std::vector<float>& out, std::vector<float>& lse,
                    int64_t window = 0) {
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  out.assign(b.q.size(), 0.0f);
  lse.assign(static_cast<size_t>(b.n_tokens * c.n_heads), 0.0f);
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    const int32_t q0 = b.query_start_loc[static_cast<size_t>(s)];
    const int32_t q_len = b.query_start_loc[static_cast<size_t>(s) + 1] - q0;
    const int64_t seq_len = b.seq_lens[static_cast<size_t>(s)];
    for (int32_t i = q0; i < q0 + q_len; ++i) {
      const int64_t key_end = causal ? seq_len - q_len + (i - q0) + 1 : seq_len;
      const int64_t first = window > 0 ? std::max<int64_t>(0, key_end - window) : 0;
      const int64_t n_keys = key_end - first;
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const float* qi = b.q.data() + (i * c.n_heads + h) * hd;
        std::vector<double> scores(static_cast<size_t>(n_keys));
        std::vector<int64_t> at(static_cast<size_t>(n_keys));  // float offset of (slot, g)
        double max_score = -INFINITY;
        for (int64_t j = 0; j < n_keys; ++j) {
          at[static_cast<size_t>(j)] = b.slot(s, first + j) * b.kv_dim + (h / group) * hd;
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += double(qi[d]) * b.k_pool[static_cast<size_t>(at[static_cast<size_t>(j)] + d)];
          scores[static_cast<size_t>(j)] = dot * b.scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
        }
        double sum = 0;
        std::vector<double> acc(static_cast<size_t>(hd), 0.0);
        for (int64_t j = 0; j < n_keys; ++j) {
          const double p = std::exp(scores[static_cast<size_t>(j)] - max_score);
          sum += p;
          for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += p * b.v_pool[static_cast<size_t>(at[static_cast<size_t>(j)] + d)];
        }
        for (int64_t d = 0; d < hd; ++d) {
          out[static_cast<size_t>((i * c.n_heads + h) * hd + d)] = static_cast<float>(acc[static_cast<size_t>(d)] / sum);
        }
        lse[static_cast<size_t>(i * c.n_heads + h)] = static_cast<float>(max_score + std::log(sum));
      }
    }
  }
}

/// lio::cpu::paged_attention_reference's output for the batch (causal).
std::vector<float> cpu_reference(const Case& c, const Batch& b) {
  std::vector<float> out(b.q.size());
  lio::cpu::paged_attention_reference(b.q.data(), b.k_pool.data(), b.v_pool.data(), out.data(),
                                      b.query_start_loc.data(), b.seq_lens.data(), b.block_tables.data(), b.n_seqs,
                                      b.max_blocks_per_seq, c.block_size, c.n_heads, c.n_kv_heads, c.head_dim,
                                      b.scale);
  return out;
}

/// A NaN-filled device array of n floats.
DeviceBuffer<float> poisoned(int64_t n) {
  DeviceBuffer<float> buf(n);
  CUDA_CHECK(cudaMemset(buf.data(), 0xFF, buf.size_bytes()));
  return buf;
}

/// The batch on the device, and poisoned outputs.
struct DeviceBatch {
  DeviceBuffer<float> q, k, v, out, lse;
  DeviceBuffer<int32_t> qsl, lens, tables;
  DeviceBatch(const Case& c, const Batch& b)
      : q(DeviceBuffer<float>::from_host(b.q)),
        k(DeviceBuffer<float>::from_host(b.k_pool)),
        v(DeviceBuffer<float>::from_host(b.v_pool)),
        out(poisoned(static_cast<int64_t>(b.q.size()))),
        lse(poisoned(b.n_tokens * c.n_heads)),
        qsl(DeviceBuffer<int32_t>::from_host(b.query_start_loc)),
        lens(DeviceBuffer<int32_t>::from_host(b.seq_lens)),
        tables(DeviceBuffer<int32_t>::from_host(b.block_tables)) {}
};

struct Result {
  std::vector<float> out, lse;
};

Result run_flash(const Case& c, const Batch& b, bool causal, bool split_kv, lio::cuda::FlashWorkspace& ws,
                 int64_t window = 0) {
  DeviceBatch d(c, b);
  lio::cuda::flash_attention(d.q.data(), d.k.data(), d.v.data(), d.out.data(), d.lse.data(), d.qsl.data(),
                             d.lens.data(), d.tables.data(), b.n_tokens, b.n_seqs, b.max_blocks_per_seq,
                             c.block_size, c.n_heads, c.n_kv_heads, c.head_dim, b.scale, causal, b.max_query_len,
                             ws, nullptr, split_kv, window);
  CUDA_CHECK(cudaDeviceSynchronize());
  return {d.out.to_host(), d.lse.to_host()};
}

/// naive_attention on `c`; max_scores_per_head as naive_attention takes it (0: the bound).
Result run_naive(const Case& c, const Batch& b, bool causal, int64_t* score_bytes, int64_t max_scores_per_head = 0,
                 int64_t window = 0) {
  DeviceBatch d(c, b);
  DeviceBuffer<float> scores;
  *score_bytes = lio::cuda::naive_attention(d.q.data(), d.k.data(), d.v.data(), d.out.data(), d.lse.data(),
                                            d.qsl.data(), d.lens.data(), d.tables.data(), b.n_tokens, b.n_seqs,
                                            b.max_blocks_per_seq, c.block_size, c.n_heads, c.n_kv_heads,
                                            c.head_dim, b.scale, causal, b.max_query_len, scores, nullptr,
                                            max_scores_per_head, window);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_GE(static_cast<int64_t>(scores.size_bytes()), *score_bytes);
  return {d.out.to_host(), d.lse.to_host()};
}

/// |got - want| <= tol x max(1, |want|) everywhere (NaN fails).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = tol * std::max(1.0, std::fabs(double(want[i])));
    ASSERT_TRUE(std::fabs(double(got[i]) - want[i]) <= bound)
        << what << " i=" << i << " got " << got[i] << " want " << want[i];
  }
}

/// Flash (split allowed) on `c`, causal, against the CPU reference and the host's out and lse.
void check_flash_causal(const Case& c, uint32_t seed) {
  const Batch b = make_batch(c, seed);
  lio::cuda::FlashWorkspace ws;
  const Result got = run_flash(c, b, /*causal=*/true, /*split_kv=*/true, ws);
  std::vector<float> want_out, want_lse;
  host_attention(c, b, true, want_out, want_lse);
  expect_close(got.out, cpu_reference(c, b), 1e-4, c.name + " out vs paged_attention_reference");
  expect_close(got.out, want_out, 1e-4, c.name + " out vs host");
  expect_close(got.lse, want_lse, 1e-4, c.name + " lse vs host");
}

/// The prefill tile Br for this group and head_dim (max_query_len past the decode limit).
int64_t prefill_rows(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  return lio::cuda::flash_attention_rows_per_block(lio::cuda::kFlashDecodeMaxQueryLen + 1, n_heads, n_kv_heads,
                                                   head_dim);
}

// ---- host-side rules and argument checks (no GPU) ----------------------------------------------

TEST(FlashAttentionRules, QueryTileRowsFollowTheGroupAndHeadDim) {
  using lio::cuda::flash_attention_rows_per_block;
  using lio::cuda::flash_attention_vectors_per_block;
  EXPECT_EQ(flash_attention_rows_per_block(100, 8, 8, 64), 64);    // prefill: 64 vectors / group 1
  EXPECT_EQ(flash_attention_rows_per_block(100, 9, 3, 64), 21);    // 64 / 3, rounded down
  EXPECT_EQ(flash_attention_rows_per_block(100, 32, 4, 128), 8);
  EXPECT_EQ(flash_attention_vectors_per_block(100, 4, 1, 256), 32);  // head_dim 256: 32 vectors
  EXPECT_EQ(flash_attention_rows_per_block(100, 4, 1, 256), 8);      // Gemma 3 270M: MQA 4/1
  EXPECT_EQ(flash_attention_vectors_per_block(1, 8, 8, 64), 4);      // decode, group 1: 4 vectors
  EXPECT_EQ(flash_attention_rows_per_block(1, 8, 8, 64), 4);
  EXPECT_EQ(flash_attention_vectors_per_block(1, 9, 3, 64), 4);      // SmolLM2's decode row: 3 of 4 busy
  EXPECT_EQ(flash_attention_vectors_per_block(2, 9, 3, 64), 8);      // 2 rows x 3 heads: 6 of 8
  EXPECT_EQ(flash_attention_rows_per_block(4, 32, 4, 128), 1);       // group 8: 8 vectors
  EXPECT_EQ(flash_attention_rows_per_block(4, 64, 1, 64), 1);        // group 64 > 8: head chunks
  EXPECT_THROW(flash_attention_rows_per_block(0, 8, 8, 64), lio::InvalidArgument);
  EXPECT_THROW(flash_attention_rows_per_block(4, 9, 2, 64), lio::InvalidArgument);
  EXPECT_THROW(flash_attention_rows_per_block(4, 8, 8, 257), lio::InvalidArgument);
}

TEST(FlashAttentionRules, SplitsFillTheCardFromTheBatchShapeAlone) {
  using lio::cuda::flash_attention_splits;
  // One decode row of SmolLM2 (9 heads over 3 KV heads, one block per KV head) on 132 SMs:
  // 3 blocks want ceil(264 / 3) = 88 splits, capped at 64 — whatever the context length.
  EXPECT_EQ(flash_attention_splits(1, 1, 9, 3, 64, 132), lio::cuda::kFlashMaxSplits);
  // 4 KV heads of group 8, one block each: ceil(264 / 4) = 66, capped.
  EXPECT_EQ(flash_attention_splits(1, 1, 32, 4, 128, 132), lio::cuda::kFlashMaxSplits);
  EXPECT_EQ(flash_attention_splits(1, 8, 32, 4, 128, 132), 9);       // 32 blocks: ceil(264 / 32)
  EXPECT_EQ(flash_attention_splits(1, 264, 32, 4, 128, 132), 1);     // enough blocks already
  EXPECT_EQ(flash_attention_splits(1, 16, 32, 4, 128, 132), 5);      // ceil(264 / 64)
  EXPECT_EQ(flash_attention_splits(1, 64, 9, 3, 64, 132), 2);        // SmolLM2 at batch 64: ceil(264 / 192)
  EXPECT_EQ(flash_attention_splits(5, 1, 32, 4, 128, 132), 1);       // prefill never splits
  EXPECT_THROW(flash_attention_splits(1, 1, 32, 4, 128, 0), lio::InvalidArgument);
  EXPECT_THROW(flash_attention_splits(1, 0, 32, 4, 128, 132), lio::InvalidArgument);
  EXPECT_EQ(lio::cuda::flash_attention_workspace_floats(64, 1, 9, 64), 64 * 9 * 66);
  EXPECT_EQ(lio::cuda::flash_attention_workspace_floats(1, 100, 9, 64), 0);  // no split, no partials
}

TEST(FlashAttentionRules, Bf16FlopsAreFourNSquaredDHalvedWhenCausal) {
  EXPECT_DOUBLE_EQ(lio::cuda::flash_attention_bf16_flops(1024, 8, 64, false), 4.0 * 1024 * 1024 * 64 * 8);
  EXPECT_DOUBLE_EQ(lio::cuda::flash_attention_bf16_flops(1024, 8, 64, true), 2.0 * 1024 * 1024 * 64 * 8);
  EXPECT_THROW(lio::cuda::flash_attention_bf16_flops(-1, 8, 64, true), lio::InvalidArgument);
}

// The launchers check on the host before touching the device: these run without a GPU. The
// pointers are never dereferenced.
TEST(FlashAttentionArgs, RejectsBadShapesBeforeLaunching) {
  float f[4] = {1, 2, 3, 4};
  int32_t i[2] = {0, 1};
  lio::cuda::FlashWorkspace ws;
  DeviceBuffer<float> scores;
  const auto flash = [&](int64_t head_dim, int64_t max_query_len) {
    lio::cuda::flash_attention(f, f, f, f, nullptr, i, i, i, 1, 1, 1, 16, 4, 2, head_dim, 0.1f, true, max_query_len,
                               ws, nullptr);
  };
  try {
    flash(257, 1);
    FAIL() << "head_dim 257 accepted";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(flash(64, 0), lio::InvalidArgument);  // max_query_len < 1
  EXPECT_THROW(flash(64, 2), lio::InvalidArgument);  // max_query_len > n_tokens
  EXPECT_THROW(lio::cuda::naive_attention(f, f, f, f, nullptr, i, i, i, 1, 1, 1, 16, 4, 2, 257, 0.1f, true, 1,
                                          scores, nullptr),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::naive_attention(f, f, f, f, nullptr, i, i, i, 1, 1, 1, 16, 4, 2, 64, 0.1f, true, 1,
                                          scores, nullptr, /*max_scores_per_head=*/17),
               lio::InvalidArgument);  // above max_query_len x max_context = 16
  EXPECT_THROW(lio::cuda::flash_attention(f, f, f, f, nullptr, i, i, i, 1, 1, 1, 16, 4, 3, 64, 0.1f, true, 1, ws,
                                          nullptr),
               lio::InvalidArgument);  // 4 heads over 3 KV heads
  alignas(16) uint16_t h[8] = {};
  EXPECT_THROW(lio::cuda::flash_attention_bf16(h, h, h, f, nullptr, 64, 2, 2, 96, 0.1f, true, nullptr),
               lio::InvalidArgument);  // head_dim 96
  EXPECT_THROW(lio::cuda::flash_attention_bf16(h + 1, h, h, f, nullptr, 64, 2, 2, 64, 0.1f, true, nullptr),
               lio::InvalidArgument);  // misaligned q
}

// ---- flash_attention (f32, paged) ---------------------------------------------------------------

// Query tiles at their edges for every group and head_dim: one batch of four sequences with
// query_len 1, Br - 1, Br and Br + 1 after cached prefixes (Br the prefill tile of the group).
TEST(FlashAttention, QueryTileEdgesMatchReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 100;
  for (const int64_t head_dim : {64, 128, 256}) {
    for (const int64_t group : {1, 3, 4, 8}) {
      const int64_t n_kv_heads = 2, n_heads = group * n_kv_heads;
      const auto br = static_cast<int32_t>(prefill_rows(n_heads, n_kv_heads, head_dim));
      const Case c{"edges d=" + std::to_string(head_dim) + " group=" + std::to_string(group) + " Br=" +
                       std::to_string(br),
                   n_heads, n_kv_heads, head_dim, 16, {{37, 1}, {0, br - 1}, {5, br}, {100, br + 1}}};
      check_flash_causal(c, seed++);
    }
  }
}

// A long prefill chunk over scattered blocks (block_size 16, shuffled), after a cached prefix,
// beside a second short sequence.
TEST(FlashAttention, LongPrefillScatteredBlocksMatchesReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_flash_causal({"long prefill group 3", 9, 3, 64, 16, {{37, 1000}, {3, 20}}}, 200);
  check_flash_causal({"long prefill group 8 d=128", 16, 2, 128, 16, {{0, 300}}}, 201);
  check_flash_causal({"long prefill MQA 4/1 d=256 (Gemma 3)", 4, 1, 256, 16, {{37, 600}, {0, 9}}}, 202);
}

// Decode rows from 1 to 8192 keys, and verification chunks of 2-4 rows: split (Flash-Decoding)
// and unsplit results agree within 1e-5 and both match the references. The batch must split.
// Short rows (1, 33 keys) leave most splits empty: the merge must skip them.
TEST(FlashAttention, DecodeSplitMatchesNoSplitAndReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  int sm_count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  uint32_t seed = 300;
  for (const int64_t head_dim : {64, 128, 256}) {
    for (const auto& [n_heads, n_kv_heads] : {std::pair<int64_t, int64_t>{8, 1}, {4, 4}, {9, 3}, {4, 1}}) {
      const Case c{"decode d=" + std::to_string(head_dim) + " heads " + std::to_string(n_heads) + "/" +
                       std::to_string(n_kv_heads),
                   n_heads, n_kv_heads, head_dim, 16, {{0, 1}, {32, 1}, {999, 1}, {8191, 1}, {5000, 3}, {700, 4}}};
      const Batch b = make_batch(c, seed++);
      ASSERT_GT(lio::cuda::flash_attention_splits(b.max_query_len, b.n_seqs, n_heads, n_kv_heads, head_dim, sm_count),
                1)
          << c.name << ": the batch does not split; the test would not test Flash-Decoding";
      lio::cuda::FlashWorkspace ws;
      const Result split = run_flash(c, b, true, true, ws);
      EXPECT_GT(ws.partials.n_elems(), 0) << c.name << ": no partials were written";
      const Result whole = run_flash(c, b, true, false, ws);
      expect_close(split.out, whole.out, 1e-5, c.name + " split vs no split");
      expect_close(split.lse, whole.lse, 1e-5, c.name + " lse split vs no split");
      std::vector<float> want_out, want_lse;
      host_attention(c, b, true, want_out, want_lse);
      expect_close(split.out, cpu_reference(c, b), 1e-4, c.name + " vs paged_attention_reference");
      expect_close(split.out, want_out, 1e-4, c.name + " vs host");
      expect_close(split.lse, want_lse, 1e-4, c.name + " lse vs host");
    }
  }
}

// A batch mixing prefill chunks (first and continued) with decode rows, block size 16 and 1.
TEST(FlashAttention, MixedPrefillDecodeMatchesReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_flash_causal({"mixed group 3 d=128", 9, 3, 128, 16, {{0, 70}, {500, 1}, {33, 1}, {16, 17}, {2, 1}}}, 400);
  check_flash_causal({"mixed group 8 d=64 block 1", 8, 1, 64, 1, {{0, 9}, {40, 1}, {3, 5}}}, 401);
}

// Sliding window (Gemma 3's local layers: window 512 over MQA 4/1 at head_dim 256; and GQA 9/3 at
// 64): prefill chunks longer than the window after cached prefixes, rows whose window starts
// mid-tile and mid-block, decode rows of 1 .. 8192 keys with and without Flash-Decoding's split,
// and windows of 1 (each row sees only itself) and past the context (no effect). Flash (split
// and not), its naive twin, chapter 04's paged kernel and its naive twin, all against the host
// loop over keys p - window + 1 .. p. Windowed decode rows must still split (the test checks).
TEST(FlashAttention, SlidingWindowMatchesHostLoop) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  int sm_count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  struct WindowCase {
    Case c;
    int64_t window;
  };
  const std::vector<WindowCase> cases = {
      {{"gemma3 prefill", 4, 1, 256, 16, {{37, 600}, {0, 9}, {700, 70}}}, 512},
      {{"gemma3 decode", 4, 1, 256, 16, {{0, 1}, {511, 1}, {512, 1}, {999, 1}, {8191, 1}, {600, 3}}}, 512},
      {{"gqa prefill window 100", 9, 3, 64, 16, {{5, 300}, {250, 2}, {0, 1}}}, 100},
      {{"gqa decode window 33", 9, 3, 64, 16, {{0, 1}, {32, 1}, {33, 1}, {4000, 1}, {70, 4}}}, 33},
      {{"window 1", 8, 2, 128, 16, {{10, 40}, {100, 1}}}, 1},
      {{"window past the context", 8, 2, 128, 1, {{3, 20}, {50, 1}}}, 100000},
  };
  uint32_t seed = 700;
  for (const WindowCase& wc : cases) {
    const Case& c = wc.c;
    const std::string what = c.name + " window " + std::to_string(wc.window);
    const Batch b = make_batch(c, seed++);
    std::vector<float> want_out, want_lse;
    host_attention(c, b, true, want_out, want_lse, wc.window);
    lio::cuda::FlashWorkspace ws;
    const Result split = run_flash(c, b, true, true, ws, wc.window);
    expect_close(split.out, want_out, 1e-4, what + " flash out");
    expect_close(split.lse, want_lse, 1e-4, what + " flash lse");
    if (b.max_query_len <= lio::cuda::kFlashDecodeMaxQueryLen) {
      ASSERT_GT(lio::cuda::flash_attention_splits(b.max_query_len, b.n_seqs, c.n_heads, c.n_kv_heads, c.head_dim,
                                                  sm_count),
                1)
          << what << ": the batch does not split";
      const Result whole = run_flash(c, b, true, false, ws, wc.window);
      expect_close(split.out, whole.out, 1e-5, what + " split vs no split");
    }
    int64_t score_bytes = 0;
    const Result naive = run_naive(c, b, true, &score_bytes, 0, wc.window);
    expect_close(naive.out, want_out, 1e-4, what + " naive out");
    expect_close(naive.lse, want_lse, 1e-4, what + " naive lse");
    for (const bool literal : {false, true}) {  // chapter 04's kernel and its naive twin
      DeviceBatch d(c, b);
      (literal ? lio::cuda::paged_attention_naive : lio::cuda::paged_attention)(
          d.q.data(), d.k.data(), d.v.data(), d.out.data(), d.qsl.data(), d.lens.data(), d.tables.data(), b.n_tokens,
          b.n_seqs, b.max_blocks_per_seq, c.block_size, c.n_heads, c.n_kv_heads, c.head_dim, b.scale, nullptr,
          wc.window, lio::cuda::DraftTrees{});  // through a pointer: no default arguments
      CUDA_CHECK(cudaDeviceSynchronize());
      expect_close(d.out.to_host(), want_out, 1e-4, what + (literal ? " paged_attention_naive" : " paged_attention"));
    }
  }
}

// A window must be >= 0, and only on causal attention.
TEST(FlashAttentionArgs, RejectsBadWindows) {
  float f[4] = {1, 2, 3, 4};  // never read: the checks come before any launch
  int32_t i[2] = {0, 1};
  lio::cuda::FlashWorkspace ws;
  DeviceBuffer<float> scores;
  const auto flash = [&](bool causal, int64_t window) {
    lio::cuda::flash_attention(f, f, f, f, nullptr, i, i, i, 1, 1, 1, 16, 4, 1, 64, 0.1f, causal, 1, ws, nullptr,
                               true, window);
  };
  EXPECT_THROW(flash(true, -1), lio::InvalidArgument);
  EXPECT_THROW(flash(false, 8), lio::InvalidArgument);  // a window counts back from a causal row
  EXPECT_THROW(lio::cuda::naive_attention(f, f, f, f, nullptr, i, i, i, 1, 1, 1, 16, 4, 1, 64, 0.1f, false, 1,
                                          scores, nullptr, 0, 8),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::paged_attention(f, f, f, f, i, i, i, 1, 1, 1, 16, 4, 1, 64, 0.1f, nullptr, -3),
               lio::InvalidArgument);
  EXPECT_THROW(lio::cuda::paged_attention_naive(f, f, f, f, i, i, i, 1, 1, 1, 16, 4, 1, 64, 0.1f, nullptr,
                                                int64_t{1} << 40),
               lio::InvalidArgument);
}

// Not causal: every row sees all seq_lens[s] keys (cached prefix and the whole chunk), prefill
// and decode (split) batches, against the host loop.
TEST(FlashAttention, NonCausalMatchesHostLoop) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Case> cases = {{"non-causal prefill", 6, 2, 64, 16, {{20, 50}, {0, 65}}},
                                   {"non-causal decode", 8, 2, 128, 16, {{4000, 1}, {10, 2}}}};
  uint32_t seed = 500;
  for (const Case& c : cases) {
    const Batch b = make_batch(c, seed++);
    lio::cuda::FlashWorkspace ws;
    const Result got = run_flash(c, b, /*causal=*/false, true, ws);
    std::vector<float> want_out, want_lse;
    host_attention(c, b, false, want_out, want_lse);
    expect_close(got.out, want_out, 1e-4, c.name);
    expect_close(got.lse, want_lse, 1e-4, c.name + " lse");
  }
}

// The workspace's first use sets every kernel's shared-memory attribute; later launches set none
// (a step a CUDA graph captures must not call cudaFuncSetAttribute), and partials reserved up
// front from flash_attention_workspace_floats are never grown (growing synchronizes the stream).
TEST(FlashAttention, WorkspaceConfiguresOnceAndReservedPartialsNeverGrow) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case c{"reserved decode d=256", 4, 1, 256, 16, {{3000, 1}, {10, 1}}};
  const Batch b = make_batch(c, 350);
  lio::cuda::FlashWorkspace ws;
  int sm_count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  const int64_t splits = lio::cuda::flash_attention_splits(1, b.n_seqs, c.n_heads, c.n_kv_heads, c.head_dim, sm_count);
  ASSERT_GT(splits, 1);
  ws.partials = DeviceBuffer<float>(lio::cuda::flash_attention_workspace_floats(splits, b.n_tokens, c.n_heads, c.head_dim));
  const Result first = run_flash(c, b, true, true, ws);
  EXPECT_TRUE(ws.configured);
  EXPECT_GT(ws.attribute_sets, 0) << "head_dim 256 tiles need more than 48 KiB: some kernel must opt in";
  const int64_t sets = ws.attribute_sets;
  const Result second = run_flash(c, b, true, true, ws);
  EXPECT_EQ(ws.attribute_sets, sets) << "attributes set again on a later launch";
  EXPECT_EQ(ws.grows, 0) << "reserved partials grew";
  expect_close(second.out, first.out, 0.0, "same launch twice");
}

// ---- naive_attention (the twin) -----------------------------------------------------------------

TEST(NaiveAttention, MatchesReferenceAndReportsScoreBytes) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case c{"naive mixed", 9, 3, 64, 16, {{0, 70}, {500, 1}, {16, 17}}};
  const Batch b = make_batch(c, 600);
  int64_t score_bytes = 0;
  const Result got = run_naive(c, b, true, &score_bytes);
  EXPECT_EQ(score_bytes, c.n_heads * b.max_query_len * b.max_blocks_per_seq * c.block_size * 4);
  std::vector<float> want_out, want_lse;
  host_attention(c, b, true, want_out, want_lse);
  expect_close(got.out, cpu_reference(c, b), 1e-4, "naive vs paged_attention_reference");
  expect_close(got.lse, want_lse, 1e-4, "naive lse vs host");
  const Result non_causal = run_naive(c, b, false, &score_bytes);
  host_attention(c, b, false, want_out, want_lse);
  expect_close(non_causal.out, want_out, 1e-4, "naive non-causal");
  expect_close(non_causal.lse, want_lse, 1e-4, "naive non-causal lse");
}

// head_dim 256 (Gemma 3): the twin takes every head_dim flash takes.
TEST(NaiveAttention, HeadDim256MatchesReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case c{"naive d=256 MQA", 4, 1, 256, 16, {{0, 40}, {300, 1}, {7, 9}}};
  const Batch b = make_batch(c, 602);
  int64_t score_bytes = 0;
  const Result got = run_naive(c, b, true, &score_bytes);
  std::vector<float> want_out, want_lse;
  host_attention(c, b, true, want_out, want_lse);
  expect_close(got.out, cpu_reference(c, b), 1e-4, "naive d=256 vs paged_attention_reference");
  expect_close(got.lse, want_lse, 1e-4, "naive d=256 lse vs host");
}

// With the host's exact bound (the largest query_len x seq_len, as CudaBackend passes it) S
// shrinks to that sequence's size and the results are the same.
TEST(NaiveAttention, ExactScoreBoundShrinksSAndChangesNothing) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case c{"naive exact bound", 6, 2, 128, 16, {{0, 70}, {900, 1}, {16, 17}}};
  const Batch b = make_batch(c, 601);
  int64_t largest = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    largest = std::max<int64_t>(largest, int64_t{c.seqs[s].query_len} * b.seq_lens[s]);
  }
  int64_t bound_bytes = 0, exact_bytes = 0;
  const Result bound = run_naive(c, b, true, &bound_bytes);
  const Result exact = run_naive(c, b, true, &exact_bytes, largest);
  EXPECT_EQ(exact_bytes, c.n_heads * largest * 4);
  EXPECT_LT(exact_bytes, bound_bytes);  // 70 x 70 < 70 x 912 (901 keys in whole blocks of 16)
  expect_close(exact.out, bound.out, 0.0, "exact bound vs bound");
  expect_close(exact.lse, bound.lse, 0.0, "exact bound vs bound lse");
  expect_close(exact.out, cpu_reference(c, b), 1e-4, "exact bound vs paged_attention_reference");
}

// ---- flash_attention_bf16 (wmma) ----------------------------------------------------------------

/// Host attention of one contiguous sequence on bf16-rounded inputs (double accumulation).
void host_contiguous(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                     int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, bool causal,
                     std::vector<float>& out, std::vector<float>& lse) {
  out.assign(static_cast<size_t>(n_heads * n * hd), 0.0f);
  lse.assign(static_cast<size_t>(n_heads * n), 0.0f);
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t g = h / (n_heads / n_kv_heads);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t n_keys = causal ? i + 1 : n;
      std::vector<double> s(static_cast<size_t>(n_keys));
      double mx = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double(q[static_cast<size_t>((h * n + i) * hd + d)]) * k[static_cast<size_t>((g * n + j) * hd + d)];
        s[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      std::vector<double> acc(static_cast<size_t>(hd), 0.0);
      for (int64_t j = 0; j < n_keys; ++j) {
        const double p = std::exp(s[static_cast<size_t>(j)] - mx);
        sum += p;
        for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += p * v[static_cast<size_t>((g * n + j) * hd + d)];
      }
      for (int64_t d = 0; d < hd; ++d) out[static_cast<size_t>((h * n + i) * hd + d)] = static_cast<float>(acc[static_cast<size_t>(d)] / sum);
      lse[static_cast<size_t>(h * n + i)] = static_cast<float>(mx + std::log(sum));
    }
  }
}

/// `x` rounded to bf16 (bits) and back (floats), for the kernel and the host reference.
void to_bf16(const std::vector<float>& x, std::vector<uint16_t>& bits, std::vector<float>& rounded) {
  bits.resize(x.size());
  rounded.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bits[i] = lio::f32_to_bf16(x[i]);
    rounded[i] = lio::bf16_to_f32(bits[i]);
  }
}

// Sequence lengths on and off the 64-row tiles, MHA and GQA, head_dim 64 and 128, causal or not.
TEST(FlashAttentionBf16, MatchesHostOnRoundedInputs) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 700;
  for (const int64_t hd : {64, 128}) {
    for (const int64_t n : {64, 200, 256}) {
      for (const auto& [n_heads, n_kv_heads] : {std::pair<int64_t, int64_t>{2, 2}, {4, 1}}) {
        for (const bool causal : {true, false}) {
          const std::string what = "bf16 d=" + std::to_string(hd) + " n=" + std::to_string(n) + " heads " +
                                   std::to_string(n_heads) + "/" + std::to_string(n_kv_heads) +
                                   (causal ? " causal" : " full");
          std::vector<uint16_t> qb, kb, vb;
          std::vector<float> qr, kr, vr;
          to_bf16(random_floats(static_cast<size_t>(n_heads * n * hd), -1.0f, 1.0f, seed++), qb, qr);
          to_bf16(random_floats(static_cast<size_t>(n_kv_heads * n * hd), -1.0f, 1.0f, seed++), kb, kr);
          to_bf16(random_floats(static_cast<size_t>(n_kv_heads * n * hd), -1.0f, 1.0f, seed++), vb, vr);
          const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
          auto q = DeviceBuffer<uint16_t>::from_host(qb);
          auto k = DeviceBuffer<uint16_t>::from_host(kb);
          auto v = DeviceBuffer<uint16_t>::from_host(vb);
          auto out = poisoned(n_heads * n * hd);
          auto lse = poisoned(n_heads * n);
          lio::cuda::flash_attention_bf16(q.data(), k.data(), v.data(), out.data(), lse.data(), n, n_heads, n_kv_heads,
                                          hd, scale, causal, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<float> want_out, want_lse;
          host_contiguous(qr, kr, vr, n, n_heads, n_kv_heads, hd, scale, causal, want_out, want_lse);
          expect_close(out.to_host(), want_out, 2e-2, what);
          expect_close(lse.to_host(), want_lse, 1e-3, what + " lse");
        }
      }
    }
  }
}

}  // namespace
