// bench_mla — chapter 02: multi-head latent attention, two experiments in one run.
//
// A. Naive vs absorbed MLA on a DeepSeek-V2-Lite-shaped stack of random layers (d_model
//    2048, 16 heads, qk_nope 128, qk_rope 64, kv_lora_rank 512, v_head_dim 128; DeepSeek-AI
//    2024, DeepSeek-V2-Lite config): equal outputs, KV bytes per token against MHA of the same
//    head shapes, decode tokens/s by context (batch 1) for both paths.
// B. The course model converted GQA -> MLA (convert_to_mla: partial RoPE + joint SVD, no
//    training) at a sweep of latent ranks: mean KL, top-1 agreement and perplexity against the
//    stored model over chapters/02_gqa_mla/eval_text.txt, and KV bytes per token saved.
// Writes --out-md and --out-json.
#include "lio/atomic_file.h"
#include "lio/omp_compat.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/cli_common.h"
#include "lio/dtype.h"
#include "lio/kv_head_variants.h"
#include "lio/mla_conversion.h"
#include "variant_eval.h"

namespace {
using json = nlohmann::ordered_json;
using lio::bench::fmt;

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

lio::WeightMatrix random_matrix(int64_t rows, int64_t cols, std::mt19937& rng, lio::Weights& w, const std::string& name) {
  auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * cols));
  std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  for (float& f : *buf) f = dist(rng);
  lio::WeightMatrix m;
  m.name = name;
  m.dtype = lio::DType::F32;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = lio::dtype_row_bytes(lio::DType::F32, cols);
  m.data = reinterpret_cast<const std::byte*>(buf->data());
  w.storage.push_back(std::shared_ptr<const void>(buf, buf->data()));
  return m;
}

// A DeepSeek-V2-Lite-shaped MLA model with random f32 weights (no tokenizer: token ids only).
lio::LoadedModel random_mla_stack(int64_t n_layers, uint32_t seed) {
  lio::LoadedModel m;
  m.path = "random DeepSeek-V2-Lite-shaped MLA stack";
  m.format = "random";
  lio::ModelConfig& c = m.config;
  c.architecture = "llama";
  c.name = m.path;
  c.n_layers = n_layers;
  c.d_model = 2048;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.head_dim = 128;
  c.d_ff = 1408;  // DeepSeek-V2-Lite's expert width: one dense MLP per layer stands in for the MoE
  c.vocab_size = 2048;
  c.context_length = 8192;
  c.rms_norm_eps = 1e-6f;
  c.tied_embeddings = true;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.validate(m.path);
  std::mt19937 rng(seed);
  lio::Weights& w = m.weights;
  w.token_embd = random_matrix(c.vocab_size, c.d_model, rng, w, "token_embd");
  w.output = w.token_embd;
  w.output_norm.assign(static_cast<size_t>(c.d_model), 1.0f);
  for (int64_t i = 0; i < c.qk_rope_head_dim / 2; ++i)
    w.mla_rope_inv_freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.qk_rope_head_dim)));
  for (int64_t l = 0; l < n_layers; ++l) {
    lio::LayerWeights L;
    L.vec(lio::WeightKind::AttnNorm).assign(static_cast<size_t>(c.d_model), 1.0f);
    L.vec(lio::WeightKind::FfnNorm).assign(static_cast<size_t>(c.d_model), 1.0f);
    L.matrix(lio::WeightKind::Wq) = random_matrix(c.q_dim(), c.d_model, rng, w, "wq");
    L.matrix(lio::WeightKind::WkvA) =
        random_matrix(c.kv_lora_rank + c.qk_rope_head_dim, c.d_model, rng, w, "wkv_a");
    L.matrix(lio::WeightKind::WkB) =
        random_matrix(c.n_heads * c.qk_nope_head_dim, c.kv_lora_rank, rng, w, "wk_b");
    L.matrix(lio::WeightKind::WvB) =
        random_matrix(c.n_heads * c.v_head_dim, c.kv_lora_rank, rng, w, "wv_b");
    L.matrix(lio::WeightKind::Wo) = random_matrix(c.d_model, c.attn_out_dim(), rng, w, "wo");
    L.matrix(lio::WeightKind::Gate) = random_matrix(c.d_ff, c.d_model, rng, w, "gate");
    L.matrix(lio::WeightKind::Up) = random_matrix(c.d_ff, c.d_model, rng, w, "up");
    L.matrix(lio::WeightKind::Down) = random_matrix(c.d_model, c.d_ff, rng, w, "down");
    w.layers.push_back(std::move(L));
  }
  return m;
}

// All-position logits of a fixed token sequence, on `device`.
std::vector<float> logits_of(const lio::LoadedModel& m, int64_t n, lio::Device device = lio::Device::Cpu) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>((i * 7919) % m.config.vocab_size));
  auto runner = lio::make_runner(m, device, lio::KvPoolOptions{16, 64});
  lio::SoloSequence seq(*runner, n);
  const std::span<const float> out = seq.forward(tokens, true);
  return {out.begin(), out.end()};
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 02 benchmark: MLA naive vs absorbed, and GQA -> MLA conversion by rank", "bench_mla"};
  lio::CommonOptions o;
  lio::add_model_flags(app, o);
  int64_t layers = 4, eval_tokens = 512, rope_pairs = 16;
  int steps = 3;
  std::string contexts = "256,512,1024,2048,4096", ranks = "32,64,96,128,160,192,224,256,288";
  std::string out_md, out_json;
  app.add_option("--layers", layers, "Layers of the random DeepSeek-V2-Lite-shaped stack")->capture_default_str();
  app.add_option("--contexts", contexts, "Context lengths of the naive/absorbed decode measurement")
      ->capture_default_str();
  app.add_option("--steps", steps, "Timed decode steps per point (median)")->capture_default_str();
  app.add_option("--ranks", ranks, "Latent ranks of the course-model conversion")->capture_default_str();
  app.add_option("--rope-pairs", rope_pairs, "RoPE pairs each KV head keeps in the conversion")->capture_default_str();
  app.add_option("--eval-tokens", eval_tokens, "Tokens of the fixed text for quality")->capture_default_str();
  app.add_option("--device", o.device,
                 "cpu|cuda: where part A (naive vs absorbed) runs; part B (conversion quality) runs on the CPU")
      ->capture_default_str();
  app.add_option("--out-md", out_md, "Write the tables as Markdown here");
  app.add_option("--out-json", out_json, "Write the results as JSON here");

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(o.threads);
    const lio::Device device = lio::parse_device(o.device);
    const double load0 = lio::bench::load_average_1min();
    const double t_start = lio::bench::now_s();
    std::ostringstream md;
    json out{{"provenance",
              {{"command", lio::bench::command_line(argc, argv)},
               {"commit", lio::bench::git_commit()},
               {"machine", lio::bench::cpu_name() + ", " + std::to_string(omp_get_max_threads()) + " threads"},
               {"date", lio::bench::utc_date()}}},
             {"machine", lio::bench::cpu_name()},
             {"threads", omp_get_max_threads()}};

    // ---- A. naive vs absorbed on the random DeepSeek-V2-Lite-shaped stack ----
    lio::LoadedModel stack = random_mla_stack(layers, 1);
    const lio::ModelConfig& sc = stack.config;
    stack.config.mla_absorbed = true;
    const std::vector<float> la = logits_of(stack, 64);
    stack.config.mla_absorbed = false;
    const std::vector<float> ln = logits_of(stack, 64);
    // On a GPU, both of its paths against the CPU's naive path as well.
    double gpu_diff = -1.0;
    if (device != lio::Device::Cpu) {
      gpu_diff = 0.0;
      for (bool absorbed : {true, false}) {
        stack.config.mla_absorbed = absorbed;
        const std::vector<float> lg = logits_of(stack, 64, device);
        for (size_t i = 0; i < lg.size(); ++i) gpu_diff = std::max(gpu_diff, static_cast<double>(std::fabs(lg[i] - ln[i])));
      }
      std::fprintf(stderr, "bench_mla: %s vs cpu: max |logit diff| %.2e\n", o.device.c_str(), gpu_diff);
    }
    const std::string device_name = lio::ch02::describe_device(stack, device);
    double max_diff = 0.0, max_mag = 0.0;
    int64_t agree = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(la[i] - ln[i])));
      max_mag = std::max(max_mag, static_cast<double>(std::fabs(ln[i])));
    }
    for (size_t r = 0; r < la.size(); r += static_cast<size_t>(sc.vocab_size)) {
      agree += std::max_element(la.begin() + static_cast<long>(r), la.begin() + static_cast<long>(r) + sc.vocab_size) - la.begin() ==
               std::max_element(ln.begin() + static_cast<long>(r), ln.begin() + static_cast<long>(r) + sc.vocab_size) - ln.begin();
    }
    const int64_t mla_bytes = lio::mla_latent_bytes_per_token(sc, 2);
    // MHA with the same heads caches each head's key (nope + rope) and value.
    const int64_t mha_bytes = sc.n_layers * sc.n_heads * (sc.qk_nope_head_dim + sc.qk_rope_head_dim + sc.v_head_dim) * 2;
    std::fprintf(stderr, "bench_mla: naive vs absorbed: max |logit diff| %.2e (max |logit| %.2f), top-1 %lld/64\n",
                 max_diff, max_mag, (long long)agree);
    json decode = json::array();
    md << "# Chapter 02: multi-head latent attention\n\n"
       << "- Machine: " << lio::bench::cpu_name() << ", " << omp_get_max_threads() << " threads\n"
       << "- Commit: " << lio::bench::git_commit() << "; date " << lio::bench::utc_date() << "\n"
       << "- Command: `build/bin/bench_mla --layers " << layers << " --contexts " << contexts << " --steps " << steps
       << " --ranks " << ranks << " --rope-pairs " << rope_pairs << " --eval-tokens " << eval_tokens
       << (device == lio::Device::Cpu ? "" : " --device " + o.device) << "`\n\n"
       << "## A. Naive vs absorbed, DeepSeek-V2-Lite-shaped random layers\n\n"
       << "- Stack: " << layers << " layers, d_model 2048, 16 heads, qk_nope 128, qk_rope 64, kv_lora_rank 512, "
       << "v_head_dim 128 (DeepSeek-V2-Lite's attention); one dense SwiGLU MLP of 1408 per layer in place of the "
       << "MoE; random f32 weights N(0, 1/fan_in); vocabulary 2048\n"
       << "- Same outputs: 64-token prompt, every position: max |logit difference| " << fmt(max_diff, 6)
       << " (largest |logit| " << fmt(max_mag, 2) << "), top-1 agreement " << agree << "/64\n"
       << "- KV bytes per token (f16, " << layers << " layers): MLA " << mla_bytes << " (Task 2), MHA with the same "
       << "heads " << mha_bytes << ": " << fmt(static_cast<double>(mha_bytes) / static_cast<double>(mla_bytes), 1)
       << "x smaller\n"
       << (gpu_diff >= 0 ? "- " + o.device + " (both paths) against the CPU's naive path: max |logit difference| " +
                               fmt(gpu_diff, 6) + "\n"
                         : std::string())
       << "- Decode on " << device_name << ": batch 1, `context` positions already cached (synthetic contents), median of " << steps
       << " steps\n\n| context | naive tok/s | absorbed tok/s | absorbed / naive |\n|---:|---:|---:|---:|\n";
    for (int64_t ctx : parse_list(contexts)) {
      stack.config.mla_absorbed = false;
      const double naive = lio::ch02::decode_tokens_per_s(stack, ctx, 1, steps, device);
      stack.config.mla_absorbed = true;
      const double absorbed = lio::ch02::decode_tokens_per_s(stack, ctx, 1, steps, device);
      std::fprintf(stderr, "bench_mla: context %lld: naive %.2f, absorbed %.2f tok/s\n", (long long)ctx, naive, absorbed);
      md << "| " << ctx << " | " << fmt(naive, 2) << " | " << fmt(absorbed, 2) << " | " << fmt(absorbed / naive, 2)
         << "x |\n";
      decode.push_back(json{{"context", ctx}, {"naive_tokens_per_s", naive}, {"absorbed_tokens_per_s", absorbed}});
    }
    out["stack"] = json{{"layers", layers},          {"max_logit_diff", max_diff}, {"max_logit", max_mag},
                        {"top1_agree_of_64", agree}, {"kv_bytes_mla_f16", mla_bytes}, {"kv_bytes_mha_f16", mha_bytes},
                        {"decode_device", device_name}, {"gpu_vs_cpu_max_logit_diff", gpu_diff}, {"decode", decode}};

    // ---- B. the course model converted to MLA, by rank ----
    const lio::LoadedModel stored = lio::load_from_options(o);
    const lio::ModelConfig& c = stored.config;
    const std::vector<int32_t> text = lio::ch02::eval_text_tokens(stored, eval_tokens);
    const lio::ch02::ReferenceLogprobs ref = lio::ch02::reference_logprobs(stored, text);
    const std::vector<int32_t> calib = lio::ch02::calibration_text_tokens(stored, 512);
    const int64_t gqa_bytes = c.kv_bytes_per_token(2);  // chapter 01's formula
    md << "\n## B. The course model converted GQA -> MLA, by latent rank\n\n"
       << "- Model: " << lio::bench::local_path_free(stored.path) << "; conversion: MHA2MLA's partial RoPE (each KV head keeps its " << rope_pairs
       << " highest-frequency pairs: d_R = " << c.n_kv_heads * 2 * rope_pairs << ") and joint SVD of the no-RoPE "
       << "keys and the values (full rank " << lio::mla_max_rank(c, rope_pairs) << "), no training; the joint "
       << "low rank two ways: SVD of the weights alone (MHA2MLA's SVD_joint), and PCA of the keys and values "
       << "over " << calib.size() << " calibration tokens (chapters/02_gqa_mla/calib_text.txt), keys balanced "
       << "to the values' norm (TransMLA's activation PCA); run by the naive path (same function as absorbed)\n"
       << "- Quality over " << text.size() << " tokens of chapters/02_gqa_mla/eval_text.txt against the stored "
       << "model; GQA caches " << gqa_bytes << " bytes per token (f16)\n\n"
       << "| rank d_c | KV bytes/token (f16) | of GQA's | SVD: mean KL | top-1 | perplexity | PCA: mean KL | "
          "top-1 | perplexity |\n"
       << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    const lio::ch02::Quality q0 = lio::ch02::evaluate_quality(stored, ref);
    md << "| GQA (stored) | " << gqa_bytes << " | 100% | " << fmt(q0.mean_kl, 5) << " | "
       << fmt(100 * q0.top1_agreement, 1) << "% | " << fmt(q0.perplexity, 3) << " | | | |\n";
    json conv = json::array();
    for (int64_t r : parse_list(ranks)) {
      json row{{"rank", r}};
      int64_t bytes = 0;
      std::string cells;
      for (bool pca : {false, true}) {
        lio::LoadedModel m = lio::load_from_options(o);
        lio::convert_to_mla(m, {r, rope_pairs, pca ? calib : std::vector<int32_t>{}});
        m.config.mla_absorbed = false;
        const lio::ch02::Quality q = lio::ch02::evaluate_quality(m, ref);
        bytes = lio::mla_latent_bytes_per_token(m.config, 2);
        std::fprintf(stderr, "bench_mla: rank %lld %s: KL %.5f, top-1 %.1f%%, ppl %.3f\n", (long long)r,
                     pca ? "pca" : "svd", q.mean_kl, 100 * q.top1_agreement, q.perplexity);
        cells += " | " + fmt(q.mean_kl, 5) + " | " + fmt(100 * q.top1_agreement, 1) + "% | " + fmt(q.perplexity, 3);
        row[pca ? "pca" : "svd"] = json{{"mean_kl", q.mean_kl}, {"top1_agreement", q.top1_agreement},
                                        {"perplexity", q.perplexity}};
      }
      row["kv_bytes_per_token_f16"] = bytes;
      md << "| " << r << " | " << bytes << " | "
         << fmt(100.0 * static_cast<double>(bytes) / static_cast<double>(gqa_bytes), 0) << "%" << cells << " |\n";
      conv.push_back(row);
    }
    out["conversion"] = json{{"model", lio::bench::local_path_free(stored.path)},         {"rope_pairs", rope_pairs},
                             {"rope_dim", c.n_kv_heads * 2 * rope_pairs}, {"gqa_kv_bytes_per_token_f16", gqa_bytes},
                             {"stored_perplexity", q0.perplexity}, {"eval_tokens", text.size()}, {"ranks", conv}};
    const double minutes = (lio::bench::now_s() - t_start) / 60.0;
    md << "\nLoad average " << fmt(load0, 2) << " at the start, " << fmt(lio::bench::load_average_1min(), 2)
       << " at the end; run " << fmt(minutes, 1) << " min.\n";
    out["load_average_start"] = load0;
    out["minutes"] = minutes;
    std::cout << md.str();
    if (!out_md.empty()) lio::write_file_atomically(out_md, md.str());
    if (!out_json.empty()) lio::write_file_atomically(out_json, out.dump(2) + "\n");
    return 0;
  });
}
