// bench_kv_cache — chapter 01's table: generation time with the KV cache vs recomputing
// the whole sequence at every step, for several generated lengths after a fixed prompt.
//
// Recompute does sum_{t=P}^{P+N} t token-passes for N new tokens (O(N^2) for N >> P);
// the cache does P + N (O(N)). So the ratio recompute / cached should grow ~linearly in N.
// Writes a CSV (length, medians, ratio); plot.py turns it into the PNG.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include "lio/atomic_file.h"
#include "lio/omp_compat.h"

#include "bench_util.h"
#include "lio/cli_common.h"
#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/model.h"

int main(int argc, char** argv) {
  CLI::App app{"Chapter 01 benchmark: KV cache vs recompute", "bench_kv_cache"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  std::vector<int64_t> lengths = {32, 64, 128, 256, 512};
  int64_t prompt_tokens = 32;
  int repeats = 3, recompute_repeats_long = 1;
  int64_t long_from = 256;
  std::string csv_path = "bench/results/01_kv_cache.csv";
  app.add_option("--lengths", lengths, "Generated lengths (tokens)")->delimiter(',')->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length (tokens)")->capture_default_str();
  app.add_option("--repeats", repeats, "Repeats per point (medians)")->capture_default_str();
  app.add_option("--long-from", long_from, "From this length on, recompute runs only --long-repeats times")
      ->capture_default_str();
  app.add_option("--long-repeats", recompute_repeats_long, "Recompute repeats for long lengths")
      ->capture_default_str();
  app.add_option("--csv", csv_path, "Output CSV")->capture_default_str();

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(o.threads);
    lio::LoadedModel m = lio::load_from_options(o);
    std::vector<int32_t> base = m.tokenizer->encode(
        "Caching keys and values turns quadratic recomputation into linear work per sequence. ", false, false);
    std::vector<int32_t> prompt;
    while (static_cast<int64_t>(prompt.size()) < prompt_tokens) prompt.insert(prompt.end(), base.begin(), base.end());
    prompt.resize(static_cast<size_t>(prompt_tokens));
    // Chapter 01's cache: one block holding the longest sequence measured.
    const int64_t capacity = std::min<int64_t>(
        m.config.context_length, prompt_tokens + *std::max_element(lengths.begin(), lengths.end()));
    lio::ModelRunner runner(std::make_unique<lio::CpuBackend>(m.config, m.weights), lio::KvPoolConfig{capacity, 1});

    // The CSV holds numbers only: these lines go into the results .md beside it.
    std::printf("%s", lio::bench::provenance_markdown(argc, argv).c_str());
    std::printf("%s | %d threads | %s (%s) | prompt %lld tokens | greedy, EOS ignored\n",
                lio::bench::cpu_name().c_str(), omp_get_max_threads(), lio::bench::local_path_free(m.path).c_str(),
                o.dtype.c_str(), (long long)prompt_tokens);
    std::printf("%8s %14s %14s %9s %10s\n", "gen_len", "cached_ms", "recompute_ms", "ratio", "identical");
    lio::AtomicFileWriter csv_file(csv_path);  // throws "cannot write '...'"; the file appears whole
    std::ofstream& csv = csv_file.stream();
    csv << "gen_tokens,prompt_tokens,cached_ms_median,recompute_ms_median,ratio,cached_runs,recompute_runs,identical\n";
    for (int64_t len : lengths) {
      lio::GenerateOptions g;
      g.max_tokens = len;
      g.ignore_eos = true;
      std::vector<double> cached, recompute;
      std::vector<int32_t> ids_cached, ids_recompute;
      for (int r = 0; r < repeats; ++r) {
        g.use_kv_cache = true;
        auto a = lio::generate(runner, *m.tokenizer, prompt, g);
        cached.push_back(a.total_ms);
        ids_cached = a.token_ids;
      }
      const int rr = len >= long_from ? recompute_repeats_long : repeats;
      for (int r = 0; r < rr; ++r) {
        g.use_kv_cache = false;
        auto b = lio::generate(runner, *m.tokenizer, prompt, g);
        recompute.push_back(b.total_ms);
        ids_recompute = b.token_ids;
      }
      const double c = lio::bench::median(cached), rc = lio::bench::median(recompute);
      const bool same = ids_cached == ids_recompute;
      std::printf("%8lld %14.1f %14.1f %8.2fx %10s\n", (long long)len, c, rc, rc / c, same ? "yes" : "no");
      std::fflush(stdout);
      csv << len << "," << prompt_tokens << "," << c << "," << rc << "," << rc / c << "," << cached.size() << ","
          << recompute.size() << "," << (same ? "true" : "false") << "\n";
    }
    csv_file.commit();
    std::printf("wrote %s\n", csv_path.c_str());
    return 0;
  });
}
