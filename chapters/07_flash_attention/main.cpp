// ch07_flash_attention — chapter 07: attention without the N x N score matrix.
//
//   ch07_flash_attention               the memory arithmetic (Task 1: lecture note 003's 2.15 GB,
//                                      then this model's S at N = 512 .. 8,192), then a short
//                                      naive-vs-flash kernel sweep
//   ch07_flash_attention kernels       naive vs flash at N = 512 .. 8,192 (prefill, one sequence,
//                                      causal) and decode (one row at context N, with and without
//                                      Flash-Decoding's split-KV): scratch bytes, time, speedup
//   ch07_flash_attention window        sliding-window attention (Gemma 3's local layers): prefill at
//                                      N = 4,096 and 8,192 with the key tiles wholly outside the
//                                      window skipped vs gathered and masked: tiles, time, speedup
//   ch07_flash_attention model         the real model end to end at a long context: prefill of an
//                                      N-token prompt and decode at depth N, with the backend
//                                      --attention-backend names
// --device cpu|cuda picks the kernels (cuda: cuda::naive_attention, cuda::flash_attention and the
// tensor-core cuda::flash_attention_bf16); --json prints one object instead of tables.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include "lio/omp_compat.h"
#include <random>
#include <sstream>

#include "flash_attention.h"
#include "lio/cli_common.h"
#include "lio/error.h"
#include "lio/generate.h"
#ifdef LIO_CH07_CUDA_SWEEP
#include "cuda_sweep.h"
#endif

namespace {
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

/// {"median", "min", "max"} of `v` (milliseconds).
json spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return json{{"median", med}, {"min", v.front()}, {"max", v.back()}};
}

/// Milliseconds `f` takes per call: calls are batched until a sample lasts >= 20 ms, `repeats`
/// samples after one warm-up call.
template <class F>
std::vector<double> time_ms(F&& f, int repeats) {
  const auto t0 = Clock::now();
  f();
  const double once = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const int calls = std::max(1, static_cast<int>(20.0 / std::max(once, 1e-3)));
  std::vector<double> out;
  for (int r = 0; r < repeats; ++r) {
    const auto t = Clock::now();
    for (int c = 0; c < calls; ++c) f();
    out.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count() / calls);
  }
  return out;
}

/// One sequence in a paged f32 pool with scattered blocks: `cached` tokens already there and
/// `fresh` query rows, random q / K / V in [-1, 1] (fixed seed).
struct Problem {
  lio::cpu::AttentionShape shape;
  std::vector<int32_t> qsl, seq_lens, table;
  std::vector<float> q, k, v, out;
  int64_t block_size = 16, n_tokens = 0;
  Problem(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t cached, int64_t fresh) {
    shape = {n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
    const int64_t n = cached + fresh, n_blocks = (n + block_size - 1) / block_size;
    qsl = {0, static_cast<int32_t>(fresh)};
    seq_lens = {static_cast<int32_t>(n)};
    table.resize(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::mt19937 rng(7);
    std::shuffle(table.begin(), table.end(), rng);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    k.resize(static_cast<size_t>(n_blocks * block_size * n_kv_heads * head_dim));
    v.resize(k.size());
    q.resize(static_cast<size_t>(fresh * n_heads * head_dim));
    out.resize(q.size());
    for (auto* x : {&k, &v, &q})
      for (float& e : *x) e = u(rng);
    n_tokens = fresh;
  }
  lio::cpu::AttentionBatch batch() const {
    return {qsl.data(), seq_lens.data(), table.data(), 1, static_cast<int64_t>(table.size()), block_size, true};
  }
  lio::cpu::PagedKvLayer kv() const { return {lio::cpu::KvElement::F32, k.data(), v.data(), nullptr, nullptr}; }
};

struct KernelOptions {
  std::string device = "cpu";
  std::vector<int64_t> ns{512, 1024, 2048, 4096, 8192};
  int repeats = 5;
  int64_t n_heads = 9, n_kv_heads = 3, head_dim = 64;  // SmolLM2-135M's attention
};

json cpu_kernel_sweep(const KernelOptions& o) {
  json prefill = json::array(), decode = json::array();
  for (const int64_t n : o.ns) {
    // Prefill: one sequence of n tokens from an empty cache.
    Problem p(o.n_heads, o.n_kv_heads, o.head_dim, 0, n);
    lio::cpu::FlashWorkspace ws;
    std::vector<float> scores, naive_out(p.out.size());
    lio::cpu::AttentionStats naive_stats, flash_stats;
    const auto naive_ms = time_ms([&] { naive_stats = lio::cpu::naive_attention(p.q.data(), p.kv(), naive_out.data(), nullptr, p.batch(), p.shape, scores); }, o.repeats);
    const auto flash_ms = time_ms([&] { flash_stats = lio::cpu::flash_attention(p.q.data(), p.kv(), p.out.data(), nullptr, p.batch(), p.shape, ws); }, o.repeats);
    float diff = 0.0f;
    for (size_t i = 0; i < p.out.size(); ++i) diff = std::max(diff, std::fabs(p.out[i] - naive_out[i]));
    json row{{"n", n}, {"naive_ms", spread(naive_ms)}, {"flash_ms", spread(flash_ms)}};
    row["speedup"] = row["naive_ms"]["median"].get<double>() / row["flash_ms"]["median"].get<double>();
    row["naive_scratch_bytes"] = naive_stats.scratch_bytes;
    row["flash_scratch_bytes"] = flash_stats.scratch_bytes;
    row["score_bytes"] = lio::cpu::attention_score_bytes(1, o.n_heads, n, n, sizeof(float));  // Task 1
    row["max_abs_diff"] = diff;
    prefill.push_back(row);
    // Decode: one row at context n (n - 1 cached tokens), with and without split-KV.
    Problem d(o.n_heads, o.n_kv_heads, o.head_dim, n - 1, 1);
    lio::cpu::FlashWorkspace dws;
    lio::cpu::AttentionStats dn, ds;
    const auto dnaive = time_ms([&] { dn = lio::cpu::naive_attention(d.q.data(), d.kv(), d.out.data(), nullptr, d.batch(), d.shape, scores); }, o.repeats);
    const auto dsplit = time_ms([&] { ds = lio::cpu::flash_attention(d.q.data(), d.kv(), d.out.data(), nullptr, d.batch(), d.shape, dws, {true}); }, o.repeats);
    const auto dnosplit = time_ms([&] { lio::cpu::flash_attention(d.q.data(), d.kv(), d.out.data(), nullptr, d.batch(), d.shape, dws, {false}); }, o.repeats);
    json drow{{"context", n}, {"batch", 1}, {"naive_ms", spread(dnaive)}, {"split_ms", spread(dsplit)}, {"nosplit_ms", spread(dnosplit)}};
    drow["split_speedup"] = drow["nosplit_ms"]["median"].get<double>() / drow["split_ms"]["median"].get<double>();
    drow["naive_scratch_bytes"] = dn.scratch_bytes;
    drow["flash_scratch_bytes"] = ds.scratch_bytes;
    decode.push_back(drow);
  }
  return json{{"prefill", prefill}, {"decode", decode}};
}

/// Sliding-window prefill (Gemma 3 270M's local layers by default: 4 query heads, 1 KV head of
/// 256, window 512): per N, the flash kernel with tiles outside the window skipped and with them
/// gathered and masked (FlashOptions::skip_window_tiles), plus full causal attention; the
/// skipped run's output against the masked one's.
json cpu_window_sweep(const KernelOptions& o, int64_t window) {
  json rows = json::array();
  for (const int64_t n : o.ns) {
    Problem p(o.n_heads, o.n_kv_heads, o.head_dim, 0, n);
    lio::cpu::FlashWorkspace ws;
    std::vector<float> masked_out(p.out.size());
    lio::cpu::AttentionStats skip_stats, mask_stats, full_stats;
    p.shape.window = window;
    const auto skip_ms = time_ms([&] { skip_stats = lio::cpu::flash_attention(p.q.data(), p.kv(), p.out.data(), nullptr, p.batch(), p.shape, ws, {true, true}); }, o.repeats);
    const auto mask_ms = time_ms([&] { mask_stats = lio::cpu::flash_attention(p.q.data(), p.kv(), masked_out.data(), nullptr, p.batch(), p.shape, ws, {true, false}); }, o.repeats);
    float diff = 0.0f;
    for (size_t i = 0; i < p.out.size(); ++i) diff = std::max(diff, std::fabs(p.out[i] - masked_out[i]));
    p.shape.window = 0;
    const auto full_ms = time_ms([&] { full_stats = lio::cpu::flash_attention(p.q.data(), p.kv(), masked_out.data(), nullptr, p.batch(), p.shape, ws); }, o.repeats);
    json row{{"n", n}, {"window", window}, {"skip_ms", spread(skip_ms)}, {"mask_ms", spread(mask_ms)}, {"full_causal_ms", spread(full_ms)}};
    row["skip_speedup"] = row["mask_ms"]["median"].get<double>() / row["skip_ms"]["median"].get<double>();
    row["tiles_gathered_skip"] = skip_stats.key_tiles;
    row["tiles_skipped"] = skip_stats.window_skipped_tiles;
    row["tiles_gathered_mask"] = mask_stats.key_tiles;
    row["tiles_full_causal"] = full_stats.key_tiles;
    row["max_abs_diff_skip_vs_mask"] = diff;
    rows.push_back(row);
  }
  return json{{"device", "cpu (" + std::to_string(omp_get_max_threads()) + " threads)"},
              {"n_heads", o.n_heads}, {"n_kv_heads", o.n_kv_heads}, {"head_dim", o.head_dim}, {"prefill", rows}};
}

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s.precision(bytes < (1 << 20) ? 3 : 1);
  s << std::fixed << static_cast<double>(bytes) / (1 << 20);
  return s.str();
}

void print_kernels(const json& j) {
  std::printf("device: %s, %d threads; heads %lld (KV %lld), head_dim %lld, one sequence, causal\n\n",
              j["device"].get<std::string>().c_str(), j["threads"].get<int>(), j["shape"]["n_heads"].get<long long>(),
              j["shape"]["n_kv_heads"].get<long long>(), j["shape"]["head_dim"].get<long long>());
  std::printf("prefill       naive (S materialized)        flash (tiles)            speedup   max |diff|\n");
  std::printf("%7s %12s %14s %12s %14s\n", "N", "ms", "scratch MiB", "ms", "scratch MiB");
  for (const json& r : j["prefill"]) {
    std::printf("%7lld %12.2f %14s %12.2f %14s %9.2fx %11.1e\n", r["n"].get<long long>(),
                r["naive_ms"]["median"].get<double>(), mib(r["naive_scratch_bytes"]).c_str(),
                r["flash_ms"]["median"].get<double>(), mib(r["flash_scratch_bytes"]).c_str(),
                r["speedup"].get<double>(), r["max_abs_diff"].get<double>());
  }
  std::printf("\ndecode (1 row)   naive ms   flash, split-KV ms   flash, one pass ms   split speedup\n");
  for (const json& r : j["decode"]) {
    std::printf("%14lld %10.3f %20.3f %20.3f %14.2fx\n", r["context"].get<long long>(), r["naive_ms"]["median"].get<double>(),
                r["split_ms"]["median"].get<double>(), r["nosplit_ms"]["median"].get<double>(), r["split_speedup"].get<double>());
  }
}

json run_kernels(const KernelOptions& o) {
  if (o.ns.empty()) throw lio::InvalidArgument("--n: give at least one length");
  for (const int64_t n : o.ns)
    if (n < 1 || n > 65536) throw lio::InvalidArgument("--n values must be in [1, 65536], got " + std::to_string(n));
  if (o.repeats < 1) throw lio::InvalidArgument("--repeats must be >= 1");
  if (o.n_heads < 1 || o.n_kv_heads < 1 || o.n_heads % o.n_kv_heads != 0 || o.head_dim < 1) {
    throw lio::InvalidArgument("--heads must be a positive multiple of --kv-heads, --head-dim >= 1");
  }
  json j;
  if (o.device == "cuda") {
#ifdef LIO_CH07_CUDA_SWEEP
    j = lio::ch07::cuda_attention_sweep(o.ns, o.n_heads, o.n_kv_heads, o.head_dim, o.repeats);
#else
    throw lio::UnsupportedError("--device cuda: this build has no CUDA kernels (configure with -DLIO_CUDA=ON)");
#endif
  } else if (o.device == "cpu") {
    j = json{{"device", "cpu"}, {"threads", omp_get_max_threads()},
             {"shape", {{"n_heads", o.n_heads}, {"n_kv_heads", o.n_kv_heads}, {"head_dim", o.head_dim}}}};
    j.update(cpu_kernel_sweep(o));
  } else {
    throw lio::InvalidArgument("--device must be cpu or cuda, got '" + o.device + "'");
  }
  return j;
}

/// The real model at a long context: an `context`-token prompt (a text repeated), greedy,
/// `decode_tokens` tokens with EOS ignored.
json run_model(const lio::CommonOptions& o, int64_t context, int64_t decode_tokens) {
  if (context < 2) throw lio::InvalidArgument("--context must be >= 2");
  if (decode_tokens < 2) throw lio::InvalidArgument("--decode-tokens must be >= 2");
  const lio::LoadedModel m = lio::load_from_options(o);
  if (context + decode_tokens > m.config.context_length) {
    throw lio::InvalidArgument("--context " + std::to_string(context) + " + --decode-tokens " + std::to_string(decode_tokens) +
                               " exceeds the model's context of " + std::to_string(m.config.context_length) + " tokens");
  }
  const std::vector<int32_t> unit = m.tokenizer->encode(
      "FlashAttention computes exact attention in tiles: the scores of one tile of queries against one tile of keys "
      "live in fast memory, the softmax is updated online, and the full matrix is never written out. ",
      false, false);
  std::vector<int32_t> prompt;
  while (static_cast<int64_t>(prompt.size()) < context) prompt.insert(prompt.end(), unit.begin(), unit.end());
  prompt.resize(static_cast<size_t>(context));
  auto runner = lio::runner_from_options(m, o);
  if (!runner) return json();  // a worker rank, done serving the driver (chapter 08): nothing to report
  lio::GenerateOptions g;
  g.max_tokens = decode_tokens;
  g.ignore_eos = true;
  g.sampler.temperature = 0.0f;
  const lio::GenerateResult r = lio::generate(*runner, *m.tokenizer, prompt, g);
  return json{{"context", context},
              {"attention_backend", o.attention_backend},
              {"device", runner->backend().device_description()},
              {"prefill_tok_s", 1000.0 * static_cast<double>(context) / r.ttft_ms},
              {"prefill_ms", r.ttft_ms},
              {"decode_tok_s", r.tokens_per_s},
              {"decode_ms_per_token", r.tpot_ms},
              {"n_decoded", static_cast<int64_t>(r.token_ids.size())}};
}

std::string split_list(const std::vector<int64_t>& v) {
  std::string s;
  for (const int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 07 — FlashAttention: tiles and the online softmax instead of the N x N score matrix"};
  lio::CommonOptions o;
  KernelOptions k;
  bool json_out = false;
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads (0 = all cores)")->capture_default_str();
  auto* kernels = app.add_subcommand("kernels", "naive vs flash kernels at N = 512 .. 8,192 (prefill and decode)");
  auto* model = app.add_subcommand("model", "the real model at a long context, prefill and decode");
  auto* window_cmd = app.add_subcommand("window", "sliding-window prefill: tiles outside the window skipped vs masked");
  KernelOptions wk;
  wk.ns = {4096, 8192};
  wk.n_heads = 4, wk.n_kv_heads = 1, wk.head_dim = 256;  // Gemma 3 270M's attention
  int64_t window = 512;
  window_cmd->add_option("--n", wk.ns, "sequence lengths (comma-separated)")->delimiter(',')->capture_default_str();
  window_cmd->add_option("--repeats", wk.repeats, "timed samples per kernel (median, min, max)")->capture_default_str();
  window_cmd->add_option("--heads", wk.n_heads, "query heads")->capture_default_str();
  window_cmd->add_option("--kv-heads", wk.n_kv_heads, "KV heads")->capture_default_str();
  window_cmd->add_option("--head-dim", wk.head_dim, "head dimension")->capture_default_str();
  window_cmd->add_option("--window", window, "keys a row sees (Gemma 3: 512)")->capture_default_str();
  window_cmd->add_flag("--json", json_out, "print one JSON object");
  for (auto* sub : {kernels}) {
    sub->add_option("--device", k.device, "cpu or cuda")->capture_default_str();
    sub->add_option("--n", k.ns, "sequence lengths (comma-separated)")->delimiter(',')->capture_default_str();
    sub->add_option("--repeats", k.repeats, "timed samples per kernel (median, min, max)")->capture_default_str();
    sub->add_option("--heads", k.n_heads, "query heads")->capture_default_str();
    sub->add_option("--kv-heads", k.n_kv_heads, "KV heads")->capture_default_str();
    sub->add_option("--head-dim", k.head_dim, "head dimension")->capture_default_str();
    sub->add_flag("--json", json_out, "print one JSON object");
  }
  int64_t context = 4096, decode_tokens = 32;
  lio::add_model_flags(*model, o);
  lio::add_device_flag(*model, o);
  lio::add_kv_pool_flags(*model, o);
  model->add_option("--context", context, "prompt tokens (the depth decode runs at)")->capture_default_str();
  model->add_option("--decode-tokens", decode_tokens, "tokens decoded after the prompt")->capture_default_str();
  return lio::run_main(app, argc, argv, [&] {
    lio::apply_threads(threads > 0 ? threads : o.threads);
    if (*model) {
      const json j = run_model(o, context, decode_tokens);
      if (j.is_null()) return 0;  // a worker rank
      if (o.json) {
        std::cout << j.dump() << "\n";
      } else {
        std::printf("%s, --attention-backend %s, context %lld\n  prefill: %.1f tok/s (%.0f ms)\n  decode at depth %lld: %.1f tok/s (%.2f ms/token)\n",
                    j["device"].get<std::string>().c_str(), o.attention_backend.c_str(), static_cast<long long>(context),
                    j["prefill_tok_s"].get<double>(), j["prefill_ms"].get<double>(), static_cast<long long>(context),
                    j["decode_tok_s"].get<double>(), j["decode_ms_per_token"].get<double>());
      }
      return 0;
    }
    if (*window_cmd) {
      if (window < 1) throw lio::InvalidArgument("--window must be >= 1, got " + std::to_string(window));
      const json j = cpu_window_sweep(wk, window);
      if (json_out) {
        std::cout << j.dump() << "\n";
        return 0;
      }
      std::printf("sliding window %lld, %lld heads / %lld KV heads of %lld, %s\n", static_cast<long long>(window),
                  static_cast<long long>(wk.n_heads), static_cast<long long>(wk.n_kv_heads),
                  static_cast<long long>(wk.head_dim), j["device"].get<std::string>().c_str());
      std::printf("%7s %12s %12s %9s %14s %14s %12s\n", "N", "skip ms", "mask ms", "speedup", "tiles (skip)",
                  "tiles (mask)", "full causal");
      for (const auto& r : j["prefill"]) {
        std::printf("%7lld %12.2f %12.2f %8.2fx %14lld %14lld %11.2f ms\n", static_cast<long long>(r["n"].get<int64_t>()),
                    r["skip_ms"]["median"].get<double>(), r["mask_ms"]["median"].get<double>(),
                    r["skip_speedup"].get<double>(), static_cast<long long>(r["tiles_gathered_skip"].get<int64_t>()),
                    static_cast<long long>(r["tiles_gathered_mask"].get<int64_t>()), r["full_causal_ms"]["median"].get<double>());
      }
      return 0;
    }
    if (*kernels) {
      const json j = run_kernels(k);
      if (json_out) {
        std::cout << j.dump() << "\n";
      } else if (k.device == "cpu") {
        print_kernels(j);
      } else {
        std::cout << j.dump(2) << "\n";
      }
      return 0;
    }
    // The default tour: Task 1's arithmetic, then a short sweep.
    std::printf("Task 1 — the score matrix standard attention materializes (attention_score_bytes):\n");
    const int64_t lecture = lio::cpu::attention_score_bytes(2, 32, 4096, 4096, 2);
    std::printf("  lecture note 003: batch 2, 32 heads, N = 4,096, fp16: %lld bytes = %.2f GB = %.2f GiB\n",
                static_cast<long long>(lecture), lecture / 1e9, lecture / double(1LL << 30));
    std::printf("  this model (9 heads), one sequence, f32:\n");
    for (const int64_t n : {512, 1024, 2048, 4096, 8192})
      std::printf("    N = %5lld: %9.1f MiB per layer\n", static_cast<long long>(n),
                  lio::cpu::attention_score_bytes(1, 9, n, n, 4) / double(1 << 20));
    std::printf("\nnaive vs flash on this machine (more: ch07_flash_attention kernels --n %s):\n\n",
                split_list(KernelOptions{}.ns).c_str());
    KernelOptions quick;
    quick.ns = {512, 1024, 2048};
    quick.repeats = 3;
    print_kernels(run_kernels(quick));
    return 0;
  });
}
