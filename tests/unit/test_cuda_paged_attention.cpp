// test_cuda_paged_attention.cpp — the paged KV cache ops (kv_append, paged_attention) against
// their naive twins and a double-precision host reference, on fresh random pools (fixed seeds,
// never zeros) with scattered block tables: mixed batches (a prefill chunk after a cached
// prefix, first-token prefill, several decode rows), block sizes 1, 16 and 256, GQA 9:3 at
// head_dim 64 (SmolLM2), head_dims off the fast path, a long context. Outputs are poisoned
// (NaN) before each launch, so a row the kernel skips cannot pass.
// GPU tests skip without a usable GPU; the argument checks run everywhere (launchers validate on
// the host before touching the device).
//
// Tolerances: outputs are convex combinations of V rows (|v| < 1), so errors are absolute:
// 2e-5 against the double reference (f32 dot products of <= 256 terms, expf within 2 ulp), and
// against the naive twin (also f32, another summation order).
// Quantized pools (chapter 03, f16 / int8): the pool after kv_append_quantized must equal the
// host rounding bit for bit (f32_to_f16; quantize_row_int8's formula per (token, KV head)), and
// attention must match the double reference over the dequantized pool within 5e-5 (the int8
// kernel multiplies the scale after the dot product: another rounding order).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "kv_append.h"
#include "paged_attention.h"
#include "quantized_kv.h"
#include "cuda_runtime_info.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "paged_layout.h"
#include "random_inputs.h"

namespace {

using lio::cuda::DeviceBuffer;
using lio::testing::random_floats;
using lio::testing::SeqSpec;  // `cached` positions already in the pool, `query_len` new rows

/// A whole test case: model shape, pool shape and the batch.
struct PagedCase {
  std::string name;
  int64_t n_heads, n_kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  int64_t pool_offset_floats = 0;  ///< > 0 shifts the pool off 16-byte alignment (scalar path)
};

/// The batch's layout (index arrays, scattered tables), a random pool holding every cached
/// prefix, and the new rows' K/V.
struct PagedBatch : lio::testing::PagedLayout {
  int64_t kv_dim = 0;
  std::vector<int32_t> slot_mapping;  // (n_tokens) the new rows' slots
  std::vector<float> q;               // (n_tokens, n_heads, head_dim)
  std::vector<float> k_new, v_new;    // (n_tokens, kv_dim)
  std::vector<float> k_pool, v_pool;  // (n_slots, kv_dim) before the append
};

/// Builds the batch of `c`: blocks handed out in a shuffled order (tables are not contiguous),
/// some blocks left unused (lio::testing::scattered_layout), every pool float random.
PagedBatch make_batch(const PagedCase& c, uint32_t seed) {
  PagedBatch b;
  static_cast<lio::testing::PagedLayout&>(b) = lio::testing::scattered_layout(c.seqs, c.block_size, seed);
  b.kv_dim = c.n_kv_heads * c.head_dim;
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    for (int32_t p = c.seqs[static_cast<size_t>(s)].cached; p < b.seq_lens[static_cast<size_t>(s)]; ++p) {
      b.slot_mapping.push_back(static_cast<int32_t>(b.slot(s, p)));
    }
  }
  b.q = random_floats(static_cast<size_t>(b.n_tokens * c.n_heads * c.head_dim), -1.0f, 1.0f,
                      seed + 1);
  b.k_new = random_floats(static_cast<size_t>(b.n_tokens * b.kv_dim), -1.0f, 1.0f, seed + 2);
  b.v_new = random_floats(static_cast<size_t>(b.n_tokens * b.kv_dim), -1.0f, 1.0f, seed + 3);
  b.k_pool = random_floats(static_cast<size_t>(b.n_slots * b.kv_dim), -1.0f, 1.0f, seed + 4);
  b.v_pool = random_floats(static_cast<size_t>(b.n_slots * b.kv_dim), -1.0f, 1.0f, seed + 5);
  return b;
}

/// The pool after kv_append, on the host: the literal assignment.
void host_append(const PagedBatch& b, std::vector<float>& k_pool, std::vector<float>& v_pool) {
  for (int64_t t = 0; t < b.n_tokens; ++t) {
    const int32_t slot = b.slot_mapping[static_cast<size_t>(t)];
    if (slot < 0) continue;
    std::copy_n(b.k_new.begin() + t * b.kv_dim, b.kv_dim, k_pool.begin() + slot * b.kv_dim);
    std::copy_n(b.v_new.begin() + t * b.kv_dim, b.kv_dim, v_pool.begin() + slot * b.kv_dim);
  }
}

/// Paged attention in double precision over the host pool (after the append).
std::vector<float> host_attention(const PagedCase& c, const PagedBatch& b,
                                  const std::vector<float>& k_pool,
                                  const std::vector<float>& v_pool, float scale) {
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  std::vector<float> out(b.q.size());
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    const int32_t q0 = b.query_start_loc[static_cast<size_t>(s)];
    const int32_t q_len = b.query_start_loc[static_cast<size_t>(s) + 1] - q0;
    for (int32_t i = q0; i < q0 + q_len; ++i) {
      const int64_t pos = b.seq_lens[static_cast<size_t>(s)] - q_len + (i - q0);
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const int64_t g = h / group;
        const float* qi = b.q.data() + (i * c.n_heads + h) * hd;
        std::vector<double> scores(static_cast<size_t>(pos + 1));
        std::vector<int64_t> slots(static_cast<size_t>(pos + 1));
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          const int64_t block =
              b.block_tables[static_cast<size_t>(s * b.max_blocks_per_seq + j / c.block_size)];
          slots[static_cast<size_t>(j)] = block * c.block_size + j % c.block_size;
          const float* k = k_pool.data() + slots[static_cast<size_t>(j)] * b.kv_dim + g * hd;
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += double(qi[d]) * k[d];
          scores[static_cast<size_t>(j)] = dot * scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
        }
        double sum = 0;
        std::vector<double> acc(static_cast<size_t>(hd), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          const double p = std::exp(scores[static_cast<size_t>(j)] - max_score);
          sum += p;
          const float* v = v_pool.data() + slots[static_cast<size_t>(j)] * b.kv_dim + g * hd;
          for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += p * v[d];
        }
        for (int64_t d = 0; d < hd; ++d) {
          out[static_cast<size_t>((i * c.n_heads + h) * hd + d)] =
              static_cast<float>(acc[static_cast<size_t>(d)] / sum);
        }
      }
    }
  }
  return out;
}

/// A batch's host arrays (PagedBatch) copied to the device.
struct DeviceBatch {
  DeviceBuffer<float> q, k, v;
  DeviceBuffer<int32_t> slots, qsl, lens, tables;
  explicit DeviceBatch(const PagedBatch& b)
      : q(DeviceBuffer<float>::from_host(b.q)),
        k(DeviceBuffer<float>::from_host(b.k_new)),
        v(DeviceBuffer<float>::from_host(b.v_new)),
        slots(DeviceBuffer<int32_t>::from_host(b.slot_mapping)),
        qsl(DeviceBuffer<int32_t>::from_host(b.query_start_loc)),
        lens(DeviceBuffer<int32_t>::from_host(b.seq_lens)),
        tables(DeviceBuffer<int32_t>::from_host(b.block_tables)) {}
};

/// A NaN-filled device array of n floats (all bits set is a quiet NaN).
DeviceBuffer<float> poisoned(int64_t n) {
  DeviceBuffer<float> buf(n);
  CUDA_CHECK(cudaMemset(buf.data(), 0xFF, buf.size_bytes()));
  return buf;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << " i=" << i;  // NaN fails ASSERT_NEAR
  }
}

/// Runs kv_append (or its twin) then paged_attention (or its twin) for `c` on the device and
/// checks the pool bit for bit and the output against the double reference; returns the output.
std::vector<float> run_case(const PagedCase& c, uint32_t seed, bool naive_append,
                            bool naive_attention) {
  const PagedBatch b = make_batch(c, seed);
  const std::string what =
      c.name + (naive_append ? " naive-append" : "") + (naive_attention ? " naive-attention" : "");
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> k_want = b.k_pool, v_want = b.v_pool;
  host_append(b, k_want, v_want);
  const std::vector<float> out_want = host_attention(c, b, k_want, v_want, scale);

  const int64_t off = c.pool_offset_floats;
  DeviceBuffer<float> k_pool(off + b.n_slots * b.kv_dim), v_pool(off + b.n_slots * b.kv_dim);
  CUDA_CHECK(cudaMemcpy(k_pool.data() + off, b.k_pool.data(), b.k_pool.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(v_pool.data() + off, b.v_pool.data(), b.v_pool.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
  const DeviceBatch d(b);
  DeviceBuffer<float> d_out = poisoned(static_cast<int64_t>(b.q.size()));

  const auto append = naive_append ? lio::cuda::kv_append_naive : lio::cuda::kv_append;
  append(d.k.data(), d.v.data(), d.slots.data(), b.n_tokens, b.kv_dim, k_pool.data() + off,
         v_pool.data() + off, nullptr);
  const auto attend =
      naive_attention ? lio::cuda::paged_attention_naive : lio::cuda::paged_attention;
  attend(d.q.data(), k_pool.data() + off, v_pool.data() + off, d_out.data(), d.qsl.data(),
         d.lens.data(), d.tables.data(), b.n_tokens, b.n_seqs, b.max_blocks_per_seq, c.block_size,
         c.n_heads, c.n_kv_heads, c.head_dim, scale, nullptr, 0, {});  // through a pointer: every argument
  CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<float> k_got(b.k_pool.size()), v_got(b.v_pool.size());
  CUDA_CHECK(cudaMemcpy(k_got.data(), k_pool.data() + off, k_got.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(v_got.data(), v_pool.data() + off, v_got.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  EXPECT_EQ(k_got, k_want) << what << ": K pool after append";
  EXPECT_EQ(v_got, v_want) << what << ": V pool after append";
  const std::vector<float> out = d_out.to_host();
  expect_near_all(out, out_want, 2e-5, what + ": attention vs double reference");
  return out;
}

// Prefill chunk after a cached prefix + first-token prefill + decode rows at several lengths.
const std::vector<SeqSpec> kMixed = {{21, 13}, {40, 1}, {0, 1}, {0, 7}, {300, 1}, {5, 1}};

const PagedCase kCases[] = {
    {"smollm2 gqa 9:3 hd64 bs16 mixed", 9, 3, 64, 16, kMixed},
    {"bs1 mixed", 9, 3, 64, 1, kMixed},
    {"bs256 mixed", 4, 2, 64, 256, {{300, 20}, {511, 1}, {0, 3}, {256, 1}}},
    {"mha hd32 bs16", 4, 4, 32, 16, {{17, 4}, {3, 1}}},
    {"hd128 8:2 bs16", 8, 2, 128, 16, {{50, 6}, {99, 1}}},
    {"hd256 4:1 bs16", 4, 1, 256, 16, {{33, 3}, {70, 1}}},
    {"hd48 (partial lanes) bs8", 6, 2, 48, 8, {{12, 5}, {30, 1}}},
    {"hd80 bs16", 2, 1, 80, 16, {{20, 2}, {9, 1}}},
    {"hd6 (scalar dot) bs4", 3, 1, 6, 4, {{10, 3}, {2, 1}}},
    {"hd64 misaligned pool (scalar dot) bs16", 9, 3, 64, 16, {{25, 4}, {7, 1}}, 1},
    {"one sequence, one token", 2, 1, 64, 16, {{0, 1}}},
};

TEST(CudaPagedAttention, MatchesHostReferenceMixedBatches) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 1001;
  for (const PagedCase& c : kCases) run_case(c, seed += 10, false, false);
}

TEST(CudaPagedAttention, NaiveTwinsMatchHostReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 2001;
  for (const PagedCase& c : kCases) run_case(c, seed += 10, true, true);
}

// Same inputs, optimized vs naive: both f32, different summation orders.
TEST(CudaPagedAttention, MatchesNaiveTwin) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 3001;
  for (const PagedCase& c : kCases) {
    seed += 10;
    const auto fast = run_case(c, seed, false, false);
    const auto naive = run_case(c, seed, false, true);
    expect_near_all(fast, naive, 2e-5, c.name + ": fast vs naive");
  }
}

// 5000 keys for one decode row: each warp walks ~40 tiles; nothing is sized by the context.
TEST(CudaPagedAttention, LongContextDecode) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  run_case({"long context", 2, 1, 64, 16, {{4999, 1}, {1200, 2}}}, 4001, false, false);
}

// Rows whose slot is negative are padding: the pool keeps its old values there.
TEST(CudaKvAppend, NegativeSlotsAreSkipped) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t kv_dim = 192, n_slots = 40;
  const std::vector<int32_t> slots = {7, -1, 39, 0, -5, 12};
  const int64_t n = static_cast<int64_t>(slots.size());
  const auto k = random_floats(static_cast<size_t>(n * kv_dim), -1.0f, 1.0f, 5001);
  const auto v = random_floats(static_cast<size_t>(n * kv_dim), -1.0f, 1.0f, 5002);
  const auto pool0 = random_floats(static_cast<size_t>(n_slots * kv_dim), -1.0f, 1.0f, 5003);
  std::vector<float> k_want = pool0, v_want = pool0;
  for (int64_t t = 0; t < n; ++t) {
    if (slots[static_cast<size_t>(t)] < 0) continue;
    std::copy_n(k.begin() + t * kv_dim, kv_dim,
                k_want.begin() + slots[static_cast<size_t>(t)] * kv_dim);
    std::copy_n(v.begin() + t * kv_dim, kv_dim,
                v_want.begin() + slots[static_cast<size_t>(t)] * kv_dim);
  }
  const auto d_k = DeviceBuffer<float>::from_host(k);
  const auto d_v = DeviceBuffer<float>::from_host(v);
  const auto d_slots = DeviceBuffer<int32_t>::from_host(slots);
  for (const auto append : {lio::cuda::kv_append, lio::cuda::kv_append_naive}) {
    auto k_pool = DeviceBuffer<float>::from_host(pool0);
    auto v_pool = DeviceBuffer<float>::from_host(pool0);
    append(d_k.data(), d_v.data(), d_slots.data(), n, kv_dim, k_pool.data(), v_pool.data(),
           nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(k_pool.to_host(), k_want);
    EXPECT_EQ(v_pool.to_host(), v_want);
  }
}

// ---- argument checks (host side: these run without a GPU) -----------------------------------

TEST(CudaPagedArguments, LaunchersRejectBadShapesBeforeLaunching) {
  // Never dereferenced: every call below must throw in its host-side check.
  auto* f = reinterpret_cast<float*>(uintptr_t{256});
  const auto* ids = reinterpret_cast<const int32_t*>(uintptr_t{256});
  using lio::InvalidArgument;
  for (const auto append : {lio::cuda::kv_append, lio::cuda::kv_append_naive}) {
    EXPECT_THROW(append(f, f, ids, -1, 64, f, f, nullptr), InvalidArgument);
    EXPECT_THROW(append(f, f, ids, 3, 0, f, f, nullptr), InvalidArgument);
    EXPECT_THROW(append(f, f, nullptr, 3, 64, f, f, nullptr), InvalidArgument);
    EXPECT_THROW(append(f, f, ids, 3, 64, nullptr, f, nullptr), InvalidArgument);
    EXPECT_THROW(append(f, f, ids, int64_t{1} << 32, 64, f, f, nullptr), InvalidArgument);
  }
  for (const auto attend : {lio::cuda::paged_attention, lio::cuda::paged_attention_naive}) {
    // Good call for reference: (q, k, v, out, qsl, lens, tables, n_tokens=4, n_seqs=2,
    // max_blocks=3, block_size=16, heads 9/3, head_dim 64, scale).
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, 4, 2, 3, 16, 9, 2, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);  // 9 heads over 2 KV heads
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, -1, 2, 3, 16, 9, 3, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, 4, 0, 3, 16, 9, 3, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);  // rows but no sequence
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, 4, 2, 0, 16, 9, 3, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, 4, 2, 3, 0, 9, 3, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);
    EXPECT_THROW(
        attend(f, f, f, f, ids, ids, ids, 4, 2, int64_t{1} << 28, 16, 9, 3, 64, 0.125f, nullptr, 0, {}),
        InvalidArgument);  // positions past INT32_MAX
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, 4, 2, 3, 16, 9, 3, 0, 0.125f, nullptr, 0, {}),
                 InvalidArgument);
    EXPECT_THROW(attend(f, f, f, f, ids, ids, ids, 4, 2, 3, 16, 9, 3, 64, NAN, nullptr, 0, {}),
                 InvalidArgument);
    EXPECT_THROW(attend(f, f, f, f, nullptr, ids, ids, 4, 2, 3, 16, 9, 3, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);
    EXPECT_THROW(attend(f, nullptr, f, f, ids, ids, ids, 4, 2, 3, 16, 9, 3, 64, 0.125f, nullptr, 0, {}),
                 InvalidArgument);
  }
  // Only the optimized kernel keeps head_dim / 32 accumulators per lane in registers.
  EXPECT_THROW(
      lio::cuda::paged_attention(f, f, f, f, ids, ids, ids, 4, 2, 3, 16, 2, 1,
                                 lio::cuda::kPagedAttentionMaxHeadDim + 1, 0.125f, nullptr),
      InvalidArgument);
}

// ---- quantized pools (chapter 03) -------------------------------------------------------------

using lio::cuda::KvQuant;

/// A pool (n_slots, n_kv_heads, head_dim) rounded on the host as kv_append_quantized rounds it:
/// f16 bits, or int8 codes with one scale per (slot, head) (quantize_row_int8's formula).
struct HostQuantPool {
  std::vector<uint16_t> half;  // F16
  std::vector<int8_t> codes;   // Int8
  std::vector<float> scales;   // Int8: (n_slots, n_kv_heads)
};

HostQuantPool host_quantize(const std::vector<float>& pool, int64_t head_dim, KvQuant type) {
  HostQuantPool q;
  if (type == KvQuant::F16) {
    for (float x : pool) q.half.push_back(lio::f32_to_f16(x));
    return q;
  }
  q.codes.resize(pool.size());
  for (size_t at = 0; at < pool.size(); at += static_cast<size_t>(head_dim)) {
    float amax = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(pool[at + static_cast<size_t>(d)]));
    const float s = amax / 127.0f;
    q.scales.push_back(s);
    for (int64_t d = 0; d < head_dim; ++d) {
      const size_t i = at + static_cast<size_t>(d);
      q.codes[i] = s > 0.0f ? static_cast<int8_t>(std::round(pool[i] / s)) : int8_t{0};
    }
  }
  return q;
}

/// The f32 values a host-rounded pool stands for.
std::vector<float> host_dequantize(const HostQuantPool& q, int64_t head_dim, KvQuant type) {
  std::vector<float> out;
  if (type == KvQuant::F16) {
    for (uint16_t h : q.half) out.push_back(lio::f16_to_f32(h));
    return out;
  }
  for (size_t i = 0; i < q.codes.size(); ++i) {
    out.push_back(q.scales[i / static_cast<size_t>(head_dim)] * static_cast<float>(q.codes[i]));
  }
  return out;
}

/// One pool array on the device, filled from `q`.
struct DeviceQuantPool {
  DeviceBuffer<uint16_t> half;
  DeviceBuffer<int8_t> codes;
  DeviceBuffer<float> scales;
  explicit DeviceQuantPool(const HostQuantPool& q) {
    if (!q.half.empty()) half = DeviceBuffer<uint16_t>::from_host(q.half);
    if (!q.codes.empty()) codes = DeviceBuffer<int8_t>::from_host(q.codes);
    if (!q.scales.empty()) scales = DeviceBuffer<float>::from_host(q.scales);
  }
  void* data() { return half.n_elems() > 0 ? static_cast<void*>(half.data()) : static_cast<void*>(codes.data()); }
};

/// kv_append_quantized then paged_attention_quantized for `c`: the pool bit for bit against the
/// host rounding, the output against the double reference over the dequantized pool.
void run_quantized_case(const PagedCase& c, uint32_t seed, KvQuant type) {
  const PagedBatch b = make_batch(c, seed);
  const std::string what = c.name + (type == KvQuant::Int8 ? " int8" : " f16");
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> k_after = b.k_pool, v_after = b.v_pool;
  host_append(b, k_after, v_after);
  // Rounding is per (slot, head), so rounding the appended pool = appending rounded rows.
  const HostQuantPool k_want = host_quantize(k_after, c.head_dim, type);
  const HostQuantPool v_want = host_quantize(v_after, c.head_dim, type);
  const std::vector<float> out_want = host_attention(c, b, host_dequantize(k_want, c.head_dim, type),
                                                     host_dequantize(v_want, c.head_dim, type), scale);

  DeviceQuantPool k_pool(host_quantize(b.k_pool, c.head_dim, type));
  DeviceQuantPool v_pool(host_quantize(b.v_pool, c.head_dim, type));
  const lio::cuda::QuantizedKvLayer layer{type, k_pool.data(), v_pool.data(), k_pool.scales.data(),
                                          v_pool.scales.data()};
  const DeviceBatch d(b);
  DeviceBuffer<float> d_out = poisoned(static_cast<int64_t>(b.q.size()));

  lio::cuda::kv_append_quantized(d.k.data(), d.v.data(), d.slots.data(), b.n_tokens, c.n_kv_heads, c.head_dim,
                                 layer, nullptr);
  lio::cuda::paged_attention_quantized(d.q.data(), layer, d_out.data(), d.qsl.data(), d.lens.data(),
                                       d.tables.data(), b.n_tokens, b.n_seqs, b.max_blocks_per_seq, c.block_size,
                                       c.n_heads, c.n_kv_heads, c.head_dim, scale, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (type == KvQuant::F16) {
    EXPECT_EQ(k_pool.half.to_host(), k_want.half) << what << ": K pool after append";
    EXPECT_EQ(v_pool.half.to_host(), v_want.half) << what << ": V pool after append";
  } else {
    EXPECT_EQ(k_pool.codes.to_host(), k_want.codes) << what << ": K codes after append";
    EXPECT_EQ(v_pool.codes.to_host(), v_want.codes) << what << ": V codes after append";
    EXPECT_EQ(k_pool.scales.to_host(), k_want.scales) << what << ": K scales after append";
    EXPECT_EQ(v_pool.scales.to_host(), v_want.scales) << what << ": V scales after append";
  }
  expect_near_all(d_out.to_host(), out_want, 5e-5, what + ": attention vs double reference");
}

// Every case of the f32 kernel (misaligned pools excepted: a quantized pool has no offset), for
// both element types: the 4-wide loads (head_dim % 4 == 0) and the scalar ones (hd6).
TEST(CudaPagedAttentionQuantized, MatchesHostRoundingAndReference) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 6001;
  for (const KvQuant type : {KvQuant::F16, KvQuant::Int8}) {
    for (const PagedCase& c : kCases) {
      if (c.pool_offset_floats == 0) run_quantized_case(c, seed += 10, type);
    }
  }
}

// A head whose K and V rows are all zero gets scale 0 and codes 0 (no division by zero), and
// attention over it is still finite.
TEST(CudaPagedAttentionQuantized, ZeroRowsGetScaleZero) {
  if (!lio::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n_kv_heads = 2, head_dim = 64, kv_dim = n_kv_heads * head_dim;
  std::vector<float> k = random_floats(static_cast<size_t>(kv_dim), -1.0f, 1.0f, 7001);
  std::fill_n(k.begin() + head_dim, head_dim, 0.0f);  // head 1 all zero
  const auto d_k = DeviceBuffer<float>::from_host(k);
  const auto d_v = DeviceBuffer<float>::from_host(k);
  const auto d_slot = DeviceBuffer<int32_t>::from_host(std::vector<int32_t>{3});
  DeviceBuffer<int8_t> kc(8 * kv_dim), vc(8 * kv_dim);
  DeviceBuffer<float> ks = DeviceBuffer<float>::from_host(std::vector<float>(8 * n_kv_heads, -1.0f));
  DeviceBuffer<float> vs = DeviceBuffer<float>::from_host(std::vector<float>(8 * n_kv_heads, -1.0f));
  lio::cuda::kv_append_quantized(d_k.data(), d_v.data(), d_slot.data(), 1, n_kv_heads, head_dim,
                                 {KvQuant::Int8, kc.data(), vc.data(), ks.data(), vs.data()}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> scales = ks.to_host();
  EXPECT_GT(scales[3 * n_kv_heads], 0.0f);
  EXPECT_EQ(scales[3 * n_kv_heads + 1], 0.0f);
  EXPECT_EQ(scales[0], -1.0f);  // other slots untouched
  const std::vector<int8_t> codes = kc.to_host();
  for (int64_t d = 0; d < head_dim; ++d) EXPECT_EQ(codes[static_cast<size_t>(3 * kv_dim + head_dim + d)], 0);
}

TEST(CudaPagedArguments, QuantizedLaunchersRejectBadInputBeforeLaunching) {
  auto* f = reinterpret_cast<float*>(uintptr_t{256});
  auto* p = reinterpret_cast<void*>(uintptr_t{256});
  const auto* ids = reinterpret_cast<const int32_t*>(uintptr_t{256});
  using lio::InvalidArgument;
  const lio::cuda::QuantizedKvLayer good{KvQuant::Int8, p, p, f, f};
  const lio::cuda::QuantizedKvLayer no_scales{KvQuant::Int8, p, p, nullptr, f};
  const lio::cuda::QuantizedKvLayer no_keys{KvQuant::F16, nullptr, p, nullptr, nullptr};
  EXPECT_THROW(lio::cuda::kv_append_quantized(f, f, ids, 3, 3, 64, no_scales, nullptr), InvalidArgument);
  EXPECT_THROW(lio::cuda::kv_append_quantized(f, f, ids, 3, 3, 64, no_keys, nullptr), InvalidArgument);
  EXPECT_THROW(lio::cuda::kv_append_quantized(f, f, ids, -1, 3, 64, good, nullptr), InvalidArgument);
  EXPECT_THROW(lio::cuda::kv_append_quantized(f, f, ids, 3, 0, 64, good, nullptr), InvalidArgument);
  EXPECT_THROW(lio::cuda::kv_append_quantized(f, f, nullptr, 3, 3, 64, good, nullptr), InvalidArgument);
  const auto attend = [&](const lio::cuda::QuantizedKvLayer& pool, int64_t n_kv_heads, int64_t head_dim) {
    lio::cuda::paged_attention_quantized(f, pool, f, ids, ids, ids, 4, 2, 3, 16, 9, n_kv_heads, head_dim, 0.125f,
                                         nullptr);
  };
  EXPECT_THROW(attend(no_scales, 3, 64), InvalidArgument);
  EXPECT_THROW(attend(no_keys, 3, 64), InvalidArgument);
  EXPECT_THROW(attend(good, 2, 64), InvalidArgument);  // 9 heads over 2 KV heads
  EXPECT_THROW(attend(good, 3, lio::cuda::kPagedAttentionMaxHeadDim + 1), InvalidArgument);
}

}  // namespace
