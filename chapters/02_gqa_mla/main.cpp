// ch02_gqa_mla — chapter 02: the KV-head axis of the course model.
//
// Builds the course model as MHA (its 3 K/V heads repeated to one per query head: the same
// function at 3x the cache), as stored (GQA, 3 K/V heads) and as MQA (the heads mean-pooled
// into one, without the uptraining the GQA paper does next), and prints side by side: KV
// bytes per token and at 4K tokens (Task 2's formula), decode tokens/s at a long context,
// and quality against the stored model over a fixed English text (mean KL, top-1
// agreement, perplexity). Then the same for the model converted to MLA (convert_to_mla) at a
// few latent ranks, run by the absorbed path (Task 4).
#include "lio/omp_compat.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "lio/cli_common.h"
#include "lio/kv_head_variants.h"
#include "lio/mla.h"
#include "lio/mla_conversion.h"
#include "variant_eval.h"

namespace {
using json = nlohmann::ordered_json;
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 02: MHA, GQA and MQA on the course model: KV bytes, decode speed, quality",
               "ch02_gqa_mla"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  std::string variants = "mha,gqa,mqa";
  int64_t eval_tokens = 512, context = 2048, batch = 1;
  int steps = 8;
  app.add_option("--variants", variants, "Comma-separated --attention values to compare")->capture_default_str();
  app.add_option("--eval-tokens", eval_tokens, "Tokens of the fixed text the quality is measured on")
      ->capture_default_str();
  app.add_option("--context", context, "Context length (tokens) of the decode-speed measurement")
      ->capture_default_str();
  app.add_option("--batch", batch, "Sequences decoded together in the speed measurement")->capture_default_str();
  app.add_option("--decode-steps", steps, "Timed decode steps (median reported)")->capture_default_str();
  app.add_option("--device", o.device, "cpu|cuda: where the decode-speed measurement runs (quality runs on the CPU)")
      ->capture_default_str();
  std::string mla_ranks = "96,192,240";
  int64_t rope_pairs = 24;
  app.add_option("--mla-ranks", mla_ranks,
                 "Latent ranks d_c of the GQA -> MLA conversions to compare (empty: none)")
      ->capture_default_str();
  app.add_option("--mla-rope-pairs", rope_pairs,
                 "RoPE pairs each KV head keeps in the MLA conversion (the shared RoPE key is "
                 "n_kv_heads x 2 x this wide)")
      ->capture_default_str();
  bool svd_only = false;
  app.add_flag("--mla-svd-only", svd_only,
               "Factorise the weights alone (MHA2MLA's SVD_joint) instead of the PCA of the keys and "
               "values over the calibration text (chapters/02_gqa_mla/calib_text.txt)");

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(o.threads);
    const lio::Device device = lio::parse_device(o.device);
    const lio::LoadedModel stored = lio::load_from_options(o);
    const lio::ModelConfig& c = stored.config;
    const std::string device_name = lio::ch02::describe_device(stored, device);
    const std::vector<int32_t> text = lio::ch02::eval_text_tokens(stored, eval_tokens);
    const lio::ch02::ReferenceLogprobs ref = lio::ch02::reference_logprobs(stored, text);
    const std::vector<int32_t> calib = svd_only ? std::vector<int32_t>{} : lio::ch02::calibration_text_tokens(stored, 512);
    if (!o.json) {
      std::printf("model %s | %lld layers, %lld query heads, %lld KV heads x %lld | quality over %zu tokens of "
                  "chapters/02_gqa_mla/eval_text.txt | decode at context %lld, batch %lld, median of %d steps | "
                  "%s\n\n",
                  stored.path.c_str(), (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads,
                  (long long)c.head_dim, text.size(), (long long)context, (long long)batch, steps,
                  device_name.c_str());
      std::printf("%-8s %8s %14s %14s %12s %10s %8s %11s\n", "variant", "KV heads", "KV B/token f32",
                  "KV MiB @4K f16", "decode tok/s", "mean KL", "top-1", "perplexity");
    }
    json rows = json::array();
    std::vector<std::string> names = lio::ch02::split_commas(variants);
    for (const std::string& r : lio::ch02::split_commas(mla_ranks)) names.push_back("mla:" + r);
    for (const std::string& name : names) {
      lio::LoadedModel m = lio::load_model(stored.path, lio::parse_weight_mode(o.dtype));
      // Bytes per token: chapter 01's formula with this many KV heads (MHA and MQA are its ends),
      // or Task 2's MLA latent.
      int64_t n_kv = 0;
      if (name.rfind("mla:", 0) == 0) {
        lio::convert_to_mla(m, {std::stoll(name.substr(4)), rope_pairs, calib});
      } else {
        n_kv = lio::parse_attention_variant(name, m.config);
        lio::apply_kv_head_variant(m, n_kv);
      }
      auto kv_bytes = [&](int64_t bytes_per_elem) {
        return m.config.is_mla() ? lio::mla_latent_bytes_per_token(m.config, bytes_per_elem)
                                 : m.config.kv_bytes_per_token(bytes_per_elem);
      };
      const int64_t bytes_f32 = kv_bytes(4);
      const double mib_4k_f16 = static_cast<double>(kv_bytes(2) * 4096) / (1 << 20);
      const lio::ch02::Quality q = lio::ch02::evaluate_quality(m, ref);
      const double tps = lio::ch02::decode_tokens_per_s(m, context, batch, steps, device);
      if (!o.json) {
        std::printf("%-8s %8s %14lld %14.1f %12.1f %10.5f %7.1f%% %11.3f\n", name.c_str(),
                    n_kv > 0 ? std::to_string(n_kv).c_str() : "latent",
                    (long long)bytes_f32, mib_4k_f16, tps, q.mean_kl, 100.0 * q.top1_agreement, q.perplexity);
        std::fflush(stdout);
      }
      rows.push_back(json{{"variant", name},
                          {"n_kv_heads", n_kv},
                          {"kv_bytes_per_token_f32", bytes_f32},
                          {"kv_mib_at_4k_f16", mib_4k_f16},
                          {"decode_tokens_per_s", tps},
                          {"mean_kl", q.mean_kl},
                          {"top1_agreement", q.top1_agreement},
                          {"perplexity", q.perplexity}});
    }
    if (o.json) {
      std::cout << json{{"model", stored.path},    {"eval_tokens", text.size()}, {"context", context}, {"device", device_name},
                        {"batch", batch},          {"decode_steps", steps},      {"variants", rows}}
                       .dump(2)
                << "\n";
    } else {
      std::printf("\nmha must match gqa (KL ~ 0, top-1 100%%): repeating K/V heads changes the memory, not the "
                  "function. mqa is mean-pooled without uptraining: the GQA paper's starting point.\n"
                  "mla:R is the model converted to MLA with latent rank R (partial RoPE keeping %lld pairs per KV "
                  "head, then %s; no training), run by the absorbed path.\n",
                  (long long)rope_pairs,
                  svd_only ? "the joint SVD of the no-RoPE key and value weights"
                           : "the PCA of the no-RoPE keys and the values over the calibration text");
    }
    return 0;
  });
}
