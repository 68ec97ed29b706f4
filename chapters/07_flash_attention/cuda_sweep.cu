// cuda_sweep.cu — chapter 07's kernel sweep on the GPU (contract: cuda_sweep.h): naive vs flash
// f32 vs flash bf16 prefill, and decode with and without Flash-Decoding, per sequence length.
#include "cuda_sweep.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "flash_attention_cuda.h"
#include "flash_attention_mma.h"
#include "cuda_runtime_info.h"
#include "cuda_timing.h"
#include "device_buffer.h"
#include "lio/dtype.h"
#include "lio/error.h"

namespace lio::ch07 {

namespace {

using cuda::DeviceBuffer;

constexpr int64_t kBlockSize = 16;  // tokens per KV block of the paged pool

/// Median device time of `launch` (which queues work on `stream`) in ms: one warm-up (which also
/// grows any workspace), then `repeats` runs each between two events.
template <typename Launch>
double median_ms(Launch&& launch, int repeats, cudaStream_t stream) {
  cuda::CudaEvent start, stop;
  launch();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(start.get(), stream));
    launch();
    CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    samples.push_back(cuda::elapsed_ms(start, stop));
  }
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  return samples.size() % 2 == 1 ? samples[mid] : (samples[mid - 1] + samples[mid]) / 2;
}

std::vector<float> uniform(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// (n, heads, d) -> (heads, n, d), rounded to bf16 bits.
std::vector<uint16_t> heads_major_bf16(const std::vector<float>& x, int64_t n, int64_t heads, int64_t d) {
  std::vector<uint16_t> out(x.size());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < d; ++i) {
        out[static_cast<size_t>((h * n + t) * d + i)] = f32_to_bf16(x[static_cast<size_t>((t * heads + h) * d + i)]);
      }
    }
  }
  return out;
}

/// max |a - b| over the common elements.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

/// "<name>, <SMs> SMs, driver <x.y>, runtime <x.y>" of device 0.
std::string device_line(int* sm_count) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  *sm_count = prop.multiProcessorCount;
  const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, driver " +
         version(driver) + ", runtime " + version(runtime);
}

void check_args(const std::vector<int64_t>& ns, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int repeats) {
  const std::string where = "cuda_attention_sweep: ";
  if (ns.empty()) throw InvalidArgument(where + "no sequence lengths");
  for (const int64_t n : ns) {
    if (n < 1 || n > (int64_t{1} << 24)) throw InvalidArgument(where + "N must be in [1, 2^24], got " + std::to_string(n));
  }
  if (head_dim != 64 && head_dim != 128) {
    throw InvalidArgument(where + "head_dim must be 64 or 128 (the bf16 kernel's), got " + std::to_string(head_dim));
  }
  if (n_kv_heads < 1 || n_heads < 1 || n_heads % n_kv_heads != 0) {
    throw InvalidArgument(where + "n_heads must be a positive multiple of n_kv_heads");
  }
  if (repeats < 1) throw InvalidArgument(where + "repeats must be >= 1");
}

/// One N: the pool, the three prefill kernels and the two decode variants.
nlohmann::ordered_json sweep_one(int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int repeats,
                                 int sm_count, cudaStream_t stream) {
  std::mt19937 rng(static_cast<uint32_t>(7 + n));
  const int64_t kv_dim = n_kv_heads * head_dim;
  const std::vector<float> q = uniform(static_cast<size_t>(n * n_heads * head_dim), rng);  // (n, heads, d)
  const std::vector<float> k = uniform(static_cast<size_t>(n * kv_dim), rng);              // (n, kv heads, d)
  const std::vector<float> v = uniform(static_cast<size_t>(n * kv_dim), rng);
  // The paged pool: blocks in a shuffled order, position j at slot table[j / 16] * 16 + j % 16.
  const int64_t n_blocks = (n + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> k_pool(static_cast<size_t>(n_blocks * kBlockSize * kv_dim), 0.0f), v_pool(k_pool.size(), 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = table[static_cast<size_t>(j / kBlockSize)] * kBlockSize + j % kBlockSize;
    std::copy_n(k.begin() + j * kv_dim, kv_dim, k_pool.begin() + slot * kv_dim);
    std::copy_n(v.begin() + j * kv_dim, kv_dim, v_pool.begin() + slot * kv_dim);
  }
  auto q_d = DeviceBuffer<float>::from_host(q);
  auto k_d = DeviceBuffer<float>::from_host(k_pool);
  auto v_d = DeviceBuffer<float>::from_host(v_pool);
  auto table_d = DeviceBuffer<int32_t>::from_host(table);
  auto prefill_qsl = DeviceBuffer<int32_t>::from_host({0, static_cast<int32_t>(n)});
  auto decode_qsl = DeviceBuffer<int32_t>::from_host({0, 1});
  auto seq_lens = DeviceBuffer<int32_t>::from_host({static_cast<int32_t>(n)});
  DeviceBuffer<float> out_naive(n * n_heads * head_dim), out_flash(n * n_heads * head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  nlohmann::ordered_json row;
  row["n"] = n;
  // Naive: S alone is n_heads n^2 floats, which a long N may not fit.
  double naive_ms = NAN;
  int64_t naive_bytes = 0;
  std::string naive_error;
  try {
    DeviceBuffer<float> scores;
    naive_ms = median_ms(
        [&] {
          naive_bytes = cuda::naive_attention(q_d.data(), k_d.data(), v_d.data(), out_naive.data(), nullptr,
                                              prefill_qsl.data(), seq_lens.data(), table_d.data(), n, 1, n_blocks,
                                              kBlockSize, n_heads, n_kv_heads, head_dim, scale, true, n, scores,
                                              stream, /*max_scores_per_head=*/n * n);
        },
        repeats, stream);
  } catch (const cuda::CudaError& e) {
    if (e.code() != cudaErrorMemoryAllocation) throw;
    (void)cudaGetLastError();  // an allocation failure is not sticky: clear it and go on
    naive_error = e.what();
  }
  cuda::FlashWorkspace ws;
  const double flash_ms = median_ms(
      [&] {
        cuda::flash_attention(q_d.data(), k_d.data(), v_d.data(), out_flash.data(), nullptr, prefill_qsl.data(),
                              seq_lens.data(), table_d.data(), n, 1, n_blocks, kBlockSize, n_heads, n_kv_heads,
                              head_dim, scale, true, n, ws, stream);
      },
      repeats, stream);
  const int64_t flash_workspace_bytes = static_cast<int64_t>(ws.partials.size_bytes());

  auto qb = DeviceBuffer<uint16_t>::from_host(heads_major_bf16(q, n, n_heads, head_dim));
  auto kb = DeviceBuffer<uint16_t>::from_host(heads_major_bf16(k, n, n_kv_heads, head_dim));
  auto vb = DeviceBuffer<uint16_t>::from_host(heads_major_bf16(v, n, n_kv_heads, head_dim));
  DeviceBuffer<float> out_bf16(n * n_heads * head_dim);
  const double bf16_ms = median_ms(
      [&] {
        cuda::flash_attention_bf16(qb.data(), kb.data(), vb.data(), out_bf16.data(), nullptr, n, n_heads, n_kv_heads,
                                   head_dim, scale, true, stream);
      },
      repeats, stream);

  const std::vector<float> flash_out = out_flash.to_host();
  std::vector<float> bf16_out = out_bf16.to_host();  // (heads, n, d) -> (n, heads, d)
  std::vector<float> bf16_tokens_major(bf16_out.size());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(bf16_out.begin() + (h * n + t) * head_dim, head_dim,
                  bf16_tokens_major.begin() + (t * n_heads + h) * head_dim);
    }
  }
  const bool have_naive = naive_error.empty();
  row["naive_ms"] = have_naive ? nlohmann::ordered_json(naive_ms) : nlohmann::ordered_json(nullptr);
  row["flash_f32_ms"] = flash_ms;
  row["flash_bf16_ms"] = bf16_ms;
  row["speedup_f32"] = have_naive ? nlohmann::ordered_json(naive_ms / flash_ms) : nlohmann::ordered_json(nullptr);
  row["tflops_bf16"] = cuda::flash_attention_bf16_flops(n, n_heads, head_dim, true) / (bf16_ms * 1e-3) / 1e12;
  row["naive_scores_bytes"] = have_naive ? nlohmann::ordered_json(naive_bytes) : nlohmann::ordered_json(nullptr);
  row["flash_workspace_bytes"] = flash_workspace_bytes;
  row["max_abs_diff"] = have_naive ? nlohmann::ordered_json(max_abs_diff(flash_out, out_naive.to_host()))
                                   : nlohmann::ordered_json(nullptr);
  row["max_abs_diff_bf16"] = max_abs_diff(bf16_tokens_major, flash_out);
  if (!have_naive) row["naive_error"] = naive_error;

  // Decode: the last position's query row over all n keys, with and without the split.
  const float* q_last = q_d.data() + (n - 1) * n_heads * head_dim;
  cuda::FlashWorkspace decode_ws;
  const auto decode = [&](bool split) {
    return median_ms(
        [&] {
          cuda::flash_attention(q_last, k_d.data(), v_d.data(), out_flash.data(), nullptr, decode_qsl.data(),
                                seq_lens.data(), table_d.data(), 1, 1, n_blocks, kBlockSize, n_heads, n_kv_heads,
                                head_dim, scale, true, 1, decode_ws, stream, split);
        },
        repeats, stream);
  };
  row["decode_split_ms"] = decode(true);
  row["decode_nosplit_ms"] = decode(false);
  row["decode_splits"] =
      cuda::flash_attention_splits(1, 1, n_heads, n_kv_heads, head_dim, sm_count);
  row["decode_workspace_bytes"] = static_cast<int64_t>(decode_ws.partials.size_bytes());
  return row;
}

}  // namespace

nlohmann::ordered_json cuda_attention_sweep(const std::vector<int64_t>& ns, int64_t n_heads, int64_t n_kv_heads,
                                            int64_t head_dim, int repeats) {
  check_args(ns, n_heads, n_kv_heads, head_dim, repeats);
  if (!cuda::cuda_available()) {
    throw UnsupportedError("cuda_attention_sweep: no usable CUDA device (the GPU sweep needs one)");
  }
  CUDA_CHECK(cudaSetDevice(0));
  int sm_count = 0;
  nlohmann::ordered_json result;
  result["device"] = device_line(&sm_count);
  result["n_heads"] = n_heads;
  result["n_kv_heads"] = n_kv_heads;
  result["head_dim"] = head_dim;
  result["block_size"] = kBlockSize;
  result["causal"] = true;
  result["repeats"] = repeats;
  cuda::CudaStream stream;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const int64_t n : ns) rows.push_back(sweep_one(n, n_heads, n_kv_heads, head_dim, repeats, sm_count, stream.get()));
  result["rows"] = std::move(rows);
  return result;
}

}  // namespace lio::ch07
