// bench_cuda_decode — batch-1 prefill and decode on the GPU next to the CPU, in one run, with
// achieved bandwidth against a device-to-device copy measured in the same run, and a
// per-kernel time breakdown of the decode step.
//
// Decode at batch 1 reads every weight byte (and the cached K/V) once per token, so
//   tokens/s <= bandwidth / bytes per token                 (the memory roofline)
// achieved GB/s = (weight bytes + K/V bytes read) x tokens/s. The ceiling is measured, not
// quoted: cudaMemcpy device-to-device moves each byte twice (read + write), so its rate is
// 2 x bytes / time — what a streaming kernel can at best reach (an H100 SXM's HBM3 is sold as
// 3.35 TB/s; NVIDIA H100 datasheet).
// Variants, side by side: CPU as stored, CUDA as stored (quantized GEMV) with chapter 07's flash
// attention (the default) and with chapter 04's paged kernel, the same with the logits row copied
// to the host for the argmax (what a CPU sampler costs: vocab_size floats over PCIe and a sync
// per token, against the device argmax's 12 bytes), CUDA with weights converted to f16 (--dtype
// f16: 2 bytes per weight, no dequantization work).
// The GPU variants run eagerly (one launch per kernel) and, for flash and paged, again with the
// decode step replayed as a CUDA graph (ModelRunner::capture_decode_graphs, issue 45: one launch
// per step; what the Engine does by default). The kernel launches of one eager decode step's
// forward pass are counted by capturing it into a graph (CudaBackend::capture_step; nothing
// runs), for flash and for paged.
// Each variant is a ModelRunner (a backend plus a KV pool just large enough for one sequence)
// driven through a SoloSequence: one sequence, its blocks in order — chapter 01's view.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include "lio/omp_compat.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "copy_bandwidth.h"
#include "cuda_check.h"
#include "device_buffer.h"
#include "lio/cli_common.h"
#include "lio/cuda_backend.h"
#include "lio/model_runner.h"
#include "lio/sampler.h"

namespace {

using json = nlohmann::ordered_json;

struct Result {
  std::string variant;
  double weight_bytes = 0;
  double prefill_tps = 0;
  double decode_tps = 0;
  double bytes_per_token = 0;  // weights + mean K/V read per decode step
  bool cuda_graphs = false;    // decode steps replayed as a CUDA graph
  int64_t graph_steps = 0;     // forward passes replayed as a graph (every run, the warm-up too)
};

/// How a variant picks the greedy token.
enum class Argmax {
  Runner,  ///< runner.forward_sample with a greedy sampler (what generate() does; on the GPU)
  Host,    ///< lio::argmax over the logits row forward() copied to the host
};

/// A runner on `device` over `model` whose KV pool holds one sequence of `tokens` positions
/// (blocks of 16): no more device memory than the run needs. Its per-step buffers are reserved
/// for one sequence of up to `tokens` rows, as the Engine reserves them.
std::unique_ptr<lio::ModelRunner> make_bench_runner(const lio::LoadedModel& model, lio::Device device,
                                                    int64_t tokens,
                                                    lio::AttentionBackend attention = lio::AttentionBackend::Flash) {
  constexpr int64_t kBlockSize = 16;
  const int64_t n_blocks = (tokens + kBlockSize - 1) / kBlockSize;
  auto runner = std::make_unique<lio::ModelRunner>(
      lio::make_backend(model, device, lio::ActivationPrecision::F32, attention), lio::KvPoolConfig{kBlockSize, n_blocks});
  runner->reserve(lio::StepLimits{tokens, 1, 1, n_blocks});
  return runner;
}

/// Kernel launches (and copies) of one batch-1 decode step's forward pass at depth prompt.size():
/// the prompt is prefilled, then the next step is captured into a CUDA graph and counted.
lio::cuda::CapturedStep count_decode_launches(lio::ModelRunner& runner, const std::vector<int32_t>& prompt) {
  const int64_t block_size = runner.kv_pool().block_size();
  const auto p = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> table(static_cast<size_t>((p + block_size) / block_size));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  lio::ForwardBatch prefill(block_size);
  prefill.add_sequence(prompt, 0, table, 1);
  runner.forward(prefill);
  lio::ForwardBatch decode(block_size);
  decode.add_sequence(std::vector<int32_t>{prompt.back()}, p, table, 1);
  auto& backend = dynamic_cast<lio::cuda::CudaBackend&>(runner.backend());
  return backend.capture_step([&] { runner.model().forward_device(decode, runner.kv_pool()); });
}

/// The runner's CUDA backend (for profiling). Throws std::bad_cast on another backend.
lio::cuda::CudaBackend& cuda_backend(lio::ModelRunner& runner) {
  return dynamic_cast<lio::cuda::CudaBackend&>(runner.backend());
}

/// Medians over `repeats` of: prefill `prompt` into a fresh sequence, then `decode_tokens`
/// greedy steps, one token each (EOS ignored). Run 0 warms up (allocations, page tables, cuBLAS).
Result measure(lio::ModelRunner& runner, const std::string& variant, double weight_bytes,
               const std::vector<int32_t>& prompt, int64_t decode_tokens, int repeats,
               Argmax where = Argmax::Runner) {
  const lio::ModelConfig& c = runner.config();
  const int64_t p = static_cast<int64_t>(prompt.size());
  lio::Sampler greedy{lio::SamplerConfig{}};  // temperature 0, no penalty: history unused
  std::vector<double> prefill_tps, decode_tps;
  const int64_t graph_steps_before = runner.graph_steps();
  for (int r = 0; r < repeats + 1; ++r) {
    lio::SoloSequence seq(runner, p + decode_tokens);  // blocks 0.. of the pool, from position 0
    const auto step = [&](std::span<const int32_t> feed) {
      return where == Argmax::Host ? lio::argmax(seq.forward(feed)) : seq.forward_sample(feed, greedy, feed);
    };
    double t0 = lio::bench::now_s();
    int32_t next = step(prompt);
    const double t_prefill = lio::bench::now_s() - t0;
    t0 = lio::bench::now_s();
    for (int64_t i = 0; i < decode_tokens; ++i) next = step(std::span(&next, 1));
    const double t_decode = lio::bench::now_s() - t0;
    if (r == 0) continue;
    prefill_tps.push_back(static_cast<double>(p) / t_prefill);
    decode_tps.push_back(static_cast<double>(decode_tokens) / t_decode);
  }
  Result res;
  res.variant = variant;
  res.weight_bytes = weight_bytes;
  res.prefill_tps = lio::bench::median(prefill_tps);
  res.decode_tps = lio::bench::median(decode_tps);
  res.cuda_graphs = !runner.graph_sizes().empty();
  res.graph_steps = runner.graph_steps() - graph_steps_before;
  const double mean_ctx = static_cast<double>(p) + 0.5 * static_cast<double>(decode_tokens + 1);
  res.bytes_per_token = weight_bytes + static_cast<double>(c.kv_bytes_per_token(sizeof(float))) * mean_ctx;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Batch-1 prefill/decode on CUDA vs CPU, achieved bandwidth, per-kernel times",
               "bench_cuda_decode"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  int64_t prompt_tokens = 128, decode_tokens = 128, cpu_decode_tokens = 32;
  int repeats = 5;
  double copy_gib = 1.0;
  bool skip_cpu = false;
  app.add_option("--prompt-tokens", prompt_tokens, "Prefill length (tokens)")->capture_default_str();
  app.add_option("--decode-tokens", decode_tokens, "GPU decode steps per repeat")->capture_default_str();
  app.add_option("--cpu-decode-tokens", cpu_decode_tokens, "CPU decode steps per repeat")->capture_default_str();
  app.add_option("--repeats", repeats, "Repeats; medians are reported")->capture_default_str();
  app.add_option("--copy-gib", copy_gib, "Buffer size of the device copy probe (GiB)")->capture_default_str();
  app.add_flag("--skip-cpu", skip_cpu, "Do not run the CPU variant");

  return lio::run_main(app, argc, argv, [&]() -> int {
    if (prompt_tokens < 1 || decode_tokens < 1 || cpu_decode_tokens < 1 || repeats < 1) {
      throw lio::InvalidArgument("--prompt-tokens, --decode-tokens, --cpu-decode-tokens and --repeats must be >= 1");
    }
    lio::apply_threads(o.threads);
    lio::LoadedModel stored = lio::load_from_options(o);  // --dtype picks the "stored" variant
    const lio::ModelConfig& c = stored.config;
    const std::vector<int32_t> prompt = lio::bench::repeat_to_length(
        stored.tokenizer->encode(lio::bench::kPromptText, false, false), prompt_tokens);
    if (prompt_tokens + decode_tokens > c.context_length) {
      throw lio::InvalidArgument("--prompt-tokens + --decode-tokens exceed the context length " +
                                 std::to_string(c.context_length));
    }

    const int64_t n_positions = prompt_tokens + decode_tokens;
    // Throws UnsupportedError without a GPU.
    std::unique_ptr<lio::ModelRunner> gpu = make_bench_runner(stored, lio::Device::Cuda, n_positions);
    const double gpu_weight_bytes = static_cast<double>(gpu->backend().weight_bytes());
    const double copy_bw = lio::bench::measure_copy_bandwidth(static_cast<int64_t>(copy_gib * (1 << 30)), 10);
    std::vector<Result> results;
    const int64_t grows_before = cuda_backend(*gpu).buffer_grows();
    results.push_back(measure(*gpu, "cuda " + o.dtype, gpu_weight_bytes, prompt, decode_tokens, repeats));
    const int64_t grows_in_steps = cuda_backend(*gpu).buffer_grows() - grows_before;
    results.push_back(measure(*gpu, "cuda " + o.dtype + ", logits to host", gpu_weight_bytes, prompt,
                              decode_tokens, repeats, Argmax::Host));
    // The same decode steps as one CUDA graph launch each (bucket 1; the prefill stays eager).
    const lio::GraphCapture capture = gpu->capture_decode_graphs(1);
    if (capture.sizes.empty()) throw lio::UnsupportedError("CUDA graph capture failed: " + capture.error);
    results.push_back(measure(*gpu, "cuda " + o.dtype + ", CUDA graph", gpu_weight_bytes, prompt, decode_tokens, repeats));
    // The fused decode kernels (--fused-kernels) inside the graph: 3 launches where there were 10.
    gpu->backend().set_fused_kernels(true);
    if (gpu->capture_decode_graphs(1).sizes.empty()) throw lio::UnsupportedError("CUDA graph capture failed (fused)");
    results.push_back(measure(*gpu, "cuda " + o.dtype + ", CUDA graph + fused kernels", gpu_weight_bytes, prompt,
                              decode_tokens, repeats));
    const lio::cuda::CapturedStep fused_step = count_decode_launches(*gpu, prompt);
    gpu->backend().set_fused_kernels(false);
    gpu->clear_decode_graphs();
    // Chapter 04's paged kernel in place of flash (the same weights, another runner).
    std::unique_ptr<lio::ModelRunner> gpu_paged =
        make_bench_runner(stored, lio::Device::Cuda, n_positions, lio::AttentionBackend::Paged);
    results.push_back(measure(*gpu_paged, "cuda " + o.dtype + ", paged attention", gpu_weight_bytes, prompt,
                              decode_tokens, repeats));
    if (gpu_paged->capture_decode_graphs(1).sizes.empty()) throw lio::UnsupportedError("CUDA graph capture failed (paged)");
    results.push_back(measure(*gpu_paged, "cuda " + o.dtype + ", paged attention, CUDA graph", gpu_weight_bytes, prompt,
                              decode_tokens, repeats));
    gpu_paged->clear_decode_graphs();
    json launches = json::array();
    for (const auto& [name, r] : {std::pair<const char*, lio::ModelRunner*>{"flash", gpu.get()}, {"paged", gpu_paged.get()}}) {
      const lio::cuda::CapturedStep step = count_decode_launches(*r, prompt);
      launches.push_back({{"attention", name}, {"kernel_launches", step.kernels}, {"copies", step.copies},
                          {"other_nodes", step.other}});
    }
    launches.push_back({{"attention", "flash, fused kernels"}, {"kernel_launches", fused_step.kernels},
                        {"copies", fused_step.copies}, {"other_nodes", fused_step.other}});
    gpu_paged.reset();

    // Per-kernel breakdown: one profiled decode run (events around every op), after timing.
    lio::cuda::CudaBackend& backend = cuda_backend(*gpu);
    backend.set_profiling(true);
    {
      lio::SoloSequence seq(*gpu, n_positions);
      lio::Sampler greedy{lio::SamplerConfig{}};
      int32_t next = seq.forward_sample(prompt, greedy, prompt);
      backend.clear_op_times();  // keep decode steps only
      for (int64_t i = 0; i < decode_tokens; ++i) next = seq.forward_sample(std::span(&next, 1), greedy, {});
    }
    const std::vector<lio::cuda::OpTime> ops = backend.op_times();
    backend.set_profiling(false);

    {
      lio::LoadedModel f16 = lio::load_model(stored.path, lio::WeightMode::F16);
      std::unique_ptr<lio::ModelRunner> gpu16 = make_bench_runner(f16, lio::Device::Cuda, n_positions);
      results.push_back(measure(*gpu16, "cuda f16", static_cast<double>(gpu16->backend().weight_bytes()),
                                prompt, decode_tokens, repeats));
    }
    if (!skip_cpu) {
      std::unique_ptr<lio::ModelRunner> cpu =
          make_bench_runner(stored, lio::Device::Cpu, prompt_tokens + cpu_decode_tokens);
      results.push_back(measure(*cpu, "cpu " + o.dtype, static_cast<double>(stored.weights.size_bytes()),
                                prompt, cpu_decode_tokens, repeats));
    }

    const std::string device = gpu->device_description();
    json j{{"provenance",
            {{"command", lio::bench::command_line(argc, argv)},
             {"commit", lio::bench::git_commit()},
             {"machine", {{"cpu", lio::bench::cpu_name()}, {"gpu", device}, {"driver", lio::bench::gpu_driver()}}},
             {"date", lio::bench::utc_date()}}},
           {"device", device},
           {"cpu", lio::bench::cpu_name()},
           {"cpu_threads", omp_get_max_threads()},
           {"model", lio::bench::local_path_free(stored.path)},
           {"prompt_tokens", prompt_tokens},
           {"decode_tokens", decode_tokens},
           {"cpu_decode_tokens", cpu_decode_tokens},
           {"repeats", repeats},
           {"copy_bandwidth_gbs", copy_bw / 1e9},
           {"graph_capture_ms", capture.seconds * 1e3}};
    json rows = json::array();
    for (const Result& r : results) {
      rows.push_back({{"variant", r.variant},
                      {"weight_bytes", r.weight_bytes},
                      {"prefill_tokens_per_s", r.prefill_tps},
                      {"decode_tokens_per_s", r.decode_tps},
                      {"decode_bytes_per_token", r.bytes_per_token},
                      {"decode_achieved_gbs", r.bytes_per_token * r.decode_tps / 1e9},
                      {"decode_fraction_of_copy_bandwidth", r.bytes_per_token * r.decode_tps / copy_bw},
                      {"cuda_graphs", r.cuda_graphs},
                      {"graph_steps", r.graph_steps}});
    }
    j["variants"] = rows;
    double total_ms = 0;
    for (const auto& op : ops) total_ms += op.total_ms;
    json op_rows = json::array();
    for (const auto& op : ops) {
      op_rows.push_back({{"op", op.op}, {"total_ms", op.total_ms}, {"calls", op.calls},
                         {"us_per_token", 1e3 * op.total_ms / static_cast<double>(decode_tokens)},
                         {"share", total_ms > 0 ? op.total_ms / total_ms : 0.0}});
    }
    j["decode_kernel_breakdown"] = op_rows;
    j["decode_step_launches"] = launches;
    j["buffer_grows_during_timed_steps"] = grows_in_steps;
    if (o.json) {
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::printf("%s", lio::bench::provenance_markdown(argc, argv).c_str());
    std::printf("%s | driver %s | host %s, %d threads\n%s | prompt %lld tokens, decode %lld (GPU) / %lld (CPU) "
                "tokens, greedy, medians of %d\n",
                device.c_str(), lio::bench::gpu_driver().c_str(), lio::bench::cpu_name().c_str(),
                omp_get_max_threads(), lio::bench::local_path_free(stored.path).c_str(),
                (long long)prompt_tokens, (long long)decode_tokens, (long long)cpu_decode_tokens, repeats);
    std::printf("device-to-device copy bandwidth (measured, read+write): %.0f GB/s\n\n", copy_bw / 1e9);
    std::printf("| variant | weights MiB | prefill tok/s | decode tok/s | decode GB/s | %% of copy BW | decode vs cpu |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    const double cpu_tps = skip_cpu ? 0.0 : results.back().decode_tps;
    for (const Result& r : results) {
      std::printf("| %s | %.1f | %.0f | %.1f | %.1f | %.1f%% | %s |\n", r.variant.c_str(),
                  r.weight_bytes / 1048576.0, r.prefill_tps, r.decode_tps,
                  r.bytes_per_token * r.decode_tps / 1e9, 100.0 * r.bytes_per_token * r.decode_tps / copy_bw,
                  cpu_tps > 0 ? (std::to_string(r.decode_tps / cpu_tps).substr(0, 5) + "x").c_str() : "-");
    }
    std::printf("\nkernel launches of one decode step's forward pass (batch 1, depth %lld; counted by capturing it "
                "into a CUDA graph; eager steps launch each one):\n| attention | kernel launches | copies |\n|---|---:|---:|\n",
                (long long)prompt_tokens);
    for (const auto& l : launches) {
      std::printf("| %s | %lld | %lld |\n", l["attention"].get<std::string>().c_str(),
                  (long long)l["kernel_launches"].get<int64_t>(), (long long)l["copies"].get<int64_t>());
    }
    std::printf("buffers grown during the timed steps (after reserve): %lld\n", (long long)grows_in_steps);
    std::printf("\ndecode kernel breakdown (cuda %s, %lld steps, CUDA events around each op):\n", o.dtype.c_str(),
                (long long)decode_tokens);
    std::printf("| op | calls/token | us/token | share |\n|---|---:|---:|---:|\n");
    for (const auto& op : ops) {
      std::printf("| %s | %.0f | %.1f | %.1f%% |\n", op.op.c_str(),
                  static_cast<double>(op.calls) / static_cast<double>(decode_tokens),
                  1e3 * op.total_ms / static_cast<double>(decode_tokens),
                  total_ms > 0 ? 100.0 * op.total_ms / total_ms : 0.0);
    }
    return 0;
  });
}
