// bench_decode — batch-1 prefill and decode throughput of LIO's CPU engine, with the
// achieved weight-read bandwidth next to a read bandwidth measured in the same run.
//
// Decode at batch 1 reads every weight byte once per token, so
//   tokens/s <= read bandwidth / weight bytes            (the memory roofline)
// and "achieved GB/s" = weight bytes x tokens/s. Prefill pushes P tokens through each
// weight at once (GEMM), so it is compute-bound and reported in tokens/s only.
// bench/cpu_decode/run.py runs this next to llama.cpp on the same files.
//
// --profile adds one more decode run with CpuBackend::set_profiling on: where a decode step's
// wall time goes by op (the matmuls by weight, attention, norms, ...), each matmul's GB/s
// against the probe, the fork/joins a step pays (one per matmul call), and the time outside
// every op (the model loop, sampling's argmax is not in it). Profiling adds two clock reads an
// op; the table's step time is that run's, not the timed median.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include "lio/omp_compat.h"

#include "bench_util.h"
#include "lio/cli_common.h"
#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/model_runner.h"
#include "lio/model.h"
#include "lio/sampler.h"

int main(int argc, char** argv) {
  CLI::App app{"Batch-1 prefill/decode throughput and achieved bandwidth", "bench_decode"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  int64_t prompt_tokens = 128, decode_tokens = 64;
  int repeats = 5;
  double bw_gib = 1.0;
  int bw_streams = 4;
  bool profile = false;
  app.add_option("--activations", o.activations,
                 "Matmul activations of quantized weights: f32 (exact) or int8 (per 32-element block)")
      ->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "Prefill length (tokens)")->capture_default_str();
  app.add_option("--decode-tokens", decode_tokens, "Decode steps per repeat (tokens)")->capture_default_str();
  app.add_option("--repeats", repeats, "Repeats; medians are reported")->capture_default_str();
  app.add_option("--bandwidth-gib", bw_gib, "Buffer size for the read-bandwidth probe (GiB)")->capture_default_str();
  app.add_option("--bandwidth-streams", bw_streams,
                 "Concurrent sequential streams per thread in the read-bandwidth probe (1 = the probe before 2026-11-27)")
      ->capture_default_str();
  app.add_flag("--profile", profile, "Also print (and put in --json) where a decode step's time goes, op by op");

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(o.threads);
    lio::LoadedModel m = lio::load_from_options(o);
    const lio::ModelConfig& c = m.config;
    const double bw = lio::bench::measure_read_bandwidth(static_cast<int64_t>(bw_gib * (1 << 30)), 5, bw_streams);
    const lio::bench::ComputePeak peak = lio::bench::measure_compute_peak();

    // A fixed, real-text prompt, repeated up to the requested length.
    const std::vector<int32_t> prompt = lio::bench::repeat_to_length(
        m.tokenizer->encode(lio::bench::kPromptText, false, false), prompt_tokens);

    if (o.activations != "f32" && o.activations != "int8") throw lio::InvalidArgument("--activations must be f32 or int8");
    const auto act = o.activations == "int8" ? lio::cpu::MatmulActivations::Int8 : lio::cpu::MatmulActivations::F32;
    auto backend = std::make_unique<lio::CpuBackend>(c, m.weights, act);
    lio::CpuBackend* cpu = backend.get();
    lio::ModelRunner runner(std::move(backend),
                            lio::KvPoolConfig{16, (prompt_tokens + decode_tokens + 15) / 16});
    lio::SoloSequence cache(runner, prompt_tokens + decode_tokens);
    std::vector<double> prefill_tps, decode_tps;
    for (int r = 0; r < repeats + 1; ++r) {  // repeat 0 warms caches and page tables
      cache.clear();
      double t0 = lio::bench::now_s();
      auto logits = cache.forward(prompt);
      const double t_prefill = lio::bench::now_s() - t0;
      int32_t next = lio::argmax(logits);
      t0 = lio::bench::now_s();
      for (int64_t i = 0; i < decode_tokens; ++i) {
        logits = cache.forward(std::span(&next, 1));
        next = lio::argmax(logits);
      }
      const double t_decode = lio::bench::now_s() - t0;
      if (r == 0) continue;
      prefill_tps.push_back(static_cast<double>(prompt_tokens) / t_prefill);
      decode_tps.push_back(static_cast<double>(decode_tokens) / t_decode);
    }
    const double dec = lio::bench::median(decode_tps), pre = lio::bench::median(prefill_tps);
    // What one decode step reads: every matrix the backend holds (packed), not the embedding
    // table it reads one row of.
    const double bytes = static_cast<double>(runner.backend().weight_bytes() - m.weights.token_embd.size_bytes());
    nlohmann::ordered_json j{{"engine", "lio"},
                             {"cpu", lio::bench::cpu_name()},
                             {"threads", omp_get_max_threads()},
                             {"model", lio::bench::local_path_free(m.path)},
                             {"dtype_mode", o.dtype},
                             {"activations", o.activations},
                             {"isa", std::string(lio::cpu::cpu_isa_name(lio::cpu::default_cpu_isa()))},
                             {"weight_bytes", bytes},
                             {"prompt_tokens", prompt_tokens},
                             {"decode_tokens", decode_tokens},
                             {"repeats", repeats},
                             {"read_bandwidth_gbs", bw / 1e9},
                             {"read_bandwidth_streams", bw_streams},
                             {"compute_peak_isa", peak.isa},
                             {"compute_peak_f32_gflops", peak.f32_gflops},
                             {"compute_peak_int8_gops", peak.int8_gops},
                             {"prefill_tokens_per_s", pre},
                             {"decode_tokens_per_s", dec},
                             {"decode_achieved_gbs", bytes * dec / 1e9},
                             {"decode_fraction_of_bandwidth", bytes * dec / bw},
                             {"prefill_runs", prefill_tps},
                             {"decode_runs", decode_tps}};
    // The profiled run: a fresh prefill, then decode_tokens steps with every op timed.
    nlohmann::ordered_json prof = nlohmann::ordered_json::array();
    double prof_step_ms = 0, prof_ops_ms = 0;
    if (profile) {
      cache.clear();
      int32_t next = lio::argmax(cache.forward(prompt));
      cpu->clear_op_times();
      cpu->set_profiling(true);
      const double t0 = lio::bench::now_s();
      for (int64_t i = 0; i < decode_tokens; ++i) next = lio::argmax(cache.forward(std::span(&next, 1)));
      prof_step_ms = (lio::bench::now_s() - t0) * 1e3 / static_cast<double>(decode_tokens);
      cpu->set_profiling(false);
      int64_t forks = 0;
      for (const lio::CpuOpTime& t : cpu->op_times()) {
        const double ms = t.total_ms / static_cast<double>(decode_tokens);
        prof_ops_ms += ms;
        const bool mm = t.weight_bytes > 0;
        if (mm) forks += t.calls;
        const double gbs = mm ? t.weight_bytes / (t.total_ms * 1e-3) / 1e9 : 0.0;
        prof.push_back({{"op", t.op},
                        {"calls_per_token", static_cast<double>(t.calls) / static_cast<double>(decode_tokens)},
                        {"ms_per_token", ms},
                        {"weight_mb_per_token", t.weight_bytes / static_cast<double>(decode_tokens) / 1e6},
                        {"gbs", gbs},
                        {"fraction_of_probe", gbs * 1e9 / bw}});
      }
      prof.push_back({{"op", "outside every op"}, {"ms_per_token", prof_step_ms - prof_ops_ms}});
      j["profile"] = {{"step_ms", prof_step_ms},
                      {"matmul_calls_per_token", static_cast<double>(forks) / static_cast<double>(decode_tokens)},
                      {"ops", prof}};
    }
    if (o.json) {
      std::cout << j.dump(2) << "\n";
    } else {
      std::printf("%s | %d threads | %s (%s, %.1f MiB of weights)\n", lio::bench::cpu_name().c_str(),
                  omp_get_max_threads(), lio::bench::local_path_free(m.path).c_str(), o.dtype.c_str(),
                  bytes / 1048576.0);
      std::printf("read bandwidth (measured) %.2f GB/s; compute peak (measured, %s) f32 %.1f GFLOP/s, int8 %.1f GOP/s\n",
                  bw / 1e9, peak.isa.c_str(), peak.f32_gflops, peak.int8_gops);
      std::printf("prefill %lld tokens: %.1f tok/s (median of %d)\n", (long long)prompt_tokens, pre, repeats);
      std::printf("decode  %lld tokens: %.1f tok/s, %.2f GB/s achieved = %.0f%% of measured bandwidth\n",
                  (long long)decode_tokens, dec, bytes * dec / 1e9, 100.0 * bytes * dec / bw);
      if (profile) {
        std::printf("\nprofiled decode step: %.3f ms (%lld tokens; each op timed on the calling thread, "
                    "fork/join and waits included)\n",
                    prof_step_ms, (long long)decode_tokens);
        std::printf("%-18s %8s %10s %7s %9s %7s\n", "op", "calls/tok", "ms/tok", "share", "GB/s", "probe");
        for (const auto& r : prof) {
          const double ms = r["ms_per_token"].get<double>();
          std::printf("%-18s ", r["op"].get<std::string>().c_str());
          if (r.contains("calls_per_token")) {
            std::printf("%9.2f", r["calls_per_token"].get<double>());
          } else {
            std::printf("%9s", "");
          }
          std::printf(" %10.3f %6.1f%%", ms, 100.0 * ms / prof_step_ms);
          if (r.contains("gbs") && r["gbs"].get<double>() > 0)
            std::printf(" %9.2f %6.0f%%", r["gbs"].get<double>(), 100.0 * r["fraction_of_probe"].get<double>());
          std::printf("\n");
        }
        std::printf("matmul calls (one OpenMP fork/join each) per token: %.0f\n",
                    j["profile"]["matmul_calls_per_token"].get<double>());
      }
    }
    return 0;
  });
}
