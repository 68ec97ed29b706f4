// bench_gqa — chapter 02: MHA vs GQA vs MQA on the course model, side by side in one run.
//
// For each variant (--attention values): KV bytes per token (f32 pool and f16), quality
// against the stored model over chapters/02_gqa_mla/eval_text.txt (mean KL, top-1
// agreement, perplexity), and decode tokens/s at each context length and batch (a decode
// step over a KV pool holding `context` positions per sequence; median over the steps).
// Ratios are against the stored GQA model. Writes --out-md and --out-json.
#include "lio/atomic_file.h"
#include "lio/omp_compat.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/cli_common.h"
#include "lio/kv_head_variants.h"
#include "variant_eval.h"

namespace {
using json = nlohmann::ordered_json;
using lio::bench::fmt;

template <class T>
std::vector<T> parse_list(const std::string& text) {
  std::vector<T> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    if constexpr (std::is_same_v<T, std::string>) {
      out.push_back(item);
    } else {
      out.push_back(static_cast<T>(std::stoll(item)));
    }
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 02 benchmark: MHA / GQA / MQA: KV bytes, decode tok/s by context, quality", "bench_gqa"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  std::string variants = "mha,gqa,mqa", contexts = "256,512,1024,2048,4096", batches = "1,16";
  std::string out_md, out_json;
  int64_t eval_tokens = 512;
  int steps = 5;
  app.add_option("--variants", variants, "Comma-separated --attention values")->capture_default_str();
  app.add_option("--contexts", contexts, "Context lengths (tokens) of the decode measurement")->capture_default_str();
  app.add_option("--batches", batches, "Batch sizes of the decode measurement")->capture_default_str();
  app.add_option("--steps", steps, "Timed decode steps per point (median)")->capture_default_str();
  app.add_option("--eval-tokens", eval_tokens, "Tokens of the fixed text for quality")->capture_default_str();
  app.add_option("--device", o.device, "cpu|cuda: where the decode measurement runs (quality runs on the CPU)")
      ->capture_default_str();
  app.add_option("--out-md", out_md, "Write the tables as Markdown here");
  app.add_option("--out-json", out_json, "Write the results as JSON here");

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(o.threads);
    const double load0 = lio::bench::load_average_1min();
    const double t_start = lio::bench::now_s();
    const lio::Device device = lio::parse_device(o.device);
    const lio::LoadedModel stored = lio::load_from_options(o);
    const lio::ModelConfig& c = stored.config;
    const std::string device_name = lio::ch02::describe_device(stored, device);
    const std::vector<int32_t> text = lio::ch02::eval_text_tokens(stored, eval_tokens);
    const lio::ch02::ReferenceLogprobs ref = lio::ch02::reference_logprobs(stored, text);
    const auto names = parse_list<std::string>(variants);
    const auto ctxs = parse_list<int64_t>(contexts);
    const auto bss = parse_list<int64_t>(batches);

    json jv = json::array();
    std::map<std::string, std::map<std::pair<int64_t, int64_t>, double>> tps;  // variant -> (batch, ctx) -> tok/s
    for (const std::string& name : names) {
      lio::LoadedModel m = lio::load_model(stored.path, lio::parse_weight_mode(o.dtype));
      const int64_t n_kv = lio::parse_attention_variant(name, m.config);
      lio::apply_kv_head_variant(m, n_kv);
      const lio::ch02::Quality q = lio::ch02::evaluate_quality(m, ref);
      std::fprintf(stderr, "bench_gqa: %s: KL %.5f, top-1 %.1f%%, ppl %.3f\n", name.c_str(), q.mean_kl,
                   100 * q.top1_agreement, q.perplexity);
      json points = json::array();
      for (int64_t b : bss) {
        for (int64_t ctx : ctxs) {
          const double v = lio::ch02::decode_tokens_per_s(m, ctx, b, steps, device);
          tps[name][{b, ctx}] = v;
          points.push_back(json{{"batch", b}, {"context", ctx}, {"decode_tokens_per_s", v}});
          std::fprintf(stderr, "bench_gqa: %s batch %lld context %lld: %.1f tok/s\n", name.c_str(), (long long)b,
                       (long long)ctx, v);
        }
      }
      jv.push_back(json{{"variant", name},
                        {"n_kv_heads", n_kv},
                        {"kv_bytes_per_token_f32", m.config.kv_bytes_per_token(4)},
                        {"kv_bytes_per_token_f16", m.config.kv_bytes_per_token(2)},
                        {"mean_kl", q.mean_kl},
                        {"top1_agreement", q.top1_agreement},
                        {"perplexity", q.perplexity},
                        {"decode", points}});
    }
    const double minutes = (lio::bench::now_s() - t_start) / 60.0;
    const double load1 = lio::bench::load_average_1min();

    std::ostringstream md;
    md << "# Chapter 02: MHA vs GQA vs MQA on the course model\n\n"
       << "- Machine: " << lio::bench::cpu_name() << ", " << omp_get_max_threads() << " threads; load average "
       << fmt(load0, 2) << " at the start, " << fmt(load1, 2) << " at the end; run " << fmt(minutes, 1) << " min\n"
       << "- Commit: " << lio::bench::git_commit() << "; date " << lio::bench::utc_date() << "\n"
       << "- Model: " << lio::bench::local_path_free(stored.path) << " (" << c.n_layers << " layers, " << c.n_heads << " query heads, "
       << c.n_kv_heads << " KV heads of " << c.head_dim << "), weights as stored; variants built in memory: "
       << "mha repeats each K/V head (same function), mqa mean-pools them (no uptraining)\n"
       << "- Quality: " << text.size() << " tokens of chapters/02_gqa_mla/eval_text.txt, all positions, against "
       << "the stored model (KL(P_stored || P_variant) in nats)\n"
       << "- Decode on " << device_name << ": one step of `batch` sequences, each with `context` positions already in the KV pool (f32, "
       << "block 16; synthetic contents: a step's time does not depend on the values), median of " << steps
       << " steps; tok/s = batch / step time\n"
       << "- Command: `build/bin/bench_gqa --variants " << variants << " --contexts " << contexts
       << " --batches " << batches << " --steps " << steps << (device == lio::Device::Cpu ? "" : " --device cuda")
       << "`\n\n"
       << "| variant | KV heads | KV bytes/token f32 | f16 | KV MiB at 4K tokens (f16) | mean KL | top-1 | "
          "perplexity |\n|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const json& v : jv) {
      md << "| " << v["variant"].get<std::string>() << " | " << v["n_kv_heads"].get<int64_t>() << " | "
         << v["kv_bytes_per_token_f32"].get<int64_t>() << " | " << v["kv_bytes_per_token_f16"].get<int64_t>()
         << " | " << fmt(v["kv_bytes_per_token_f16"].get<double>() * 4096 / (1 << 20), 1) << " | "
         << fmt(v["mean_kl"].get<double>(), 5) << " | " << fmt(100 * v["top1_agreement"].get<double>(), 1)
         << "% | " << fmt(v["perplexity"].get<double>(), 3) << " |\n";
    }
    const std::string base = tps.count("gqa") ? "gqa" : names.front();
    for (int64_t b : bss) {
      md << "\nDecode tokens/s, batch " << b << " (ratio to " << base << " in parentheses):\n\n| context |";
      for (const auto& n : names) md << " " << n << " |";
      md << "\n|---:|";
      for (size_t i = 0; i < names.size(); ++i) md << "---:|";
      md << "\n";
      for (int64_t ctx : ctxs) {
        md << "| " << ctx << " |";
        for (const auto& n : names) {
          const double v = tps[n][{b, ctx}];
          md << " " << fmt(v, 1) << " (" << fmt(v / tps[base][{b, ctx}], 2) << "x) |";
        }
        md << "\n";
      }
    }
    std::cout << md.str();
    if (!out_md.empty()) lio::write_file_atomically(out_md, md.str());
    if (!out_json.empty()) {
      lio::write_file_atomically(out_json, json{{"provenance",
                                       {{"command", lio::bench::command_line(argc, argv)},
                                        {"commit", lio::bench::git_commit()},
                                        {"machine", lio::bench::cpu_name() + ", " +
                                                        std::to_string(omp_get_max_threads()) + " threads"},
                                        {"date", lio::bench::utc_date()}}},
                                      {"machine", lio::bench::cpu_name()},
                                      {"threads", omp_get_max_threads()},
                                      {"decode_device", device_name},
                                      {"model", lio::bench::local_path_free(stored.path)},
                                      {"eval_tokens", text.size()},
                                      {"steps", steps},
                                      {"load_average_start", load0},
                                      {"load_average_end", load1},
                                      {"variants", jv}}
                                     .dump(2) + "\n");
    }
    return 0;
  });
}
