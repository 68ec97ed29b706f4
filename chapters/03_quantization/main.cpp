// ch03_quantization — chapter 03: the course model at several weight formats, one table.
//
// The reference is the F32 copy setup makes (--reference). Each variant is made from it by
// `lio quantize` in a temporary directory — RTN at llama.cpp's grids (q8_0, q4_1, q4_0: each
// block through the chapter's Tasks 2-3) or METHOD:BITS[a]gGROUP (rtn, gptq through Task 4,
// awq through Task 5, calibrated on --calib; GROUP "ch" is one scale per output channel) — or
// is the reference itself (f32), or any GGUF file given with --files (e.g. the Q4_1 file as
// shipped). Suffixes change how a file runs: "+a8" W8A8's per-token int8 activations (Task 6),
// "+a8b" per-32-block ones (llama.cpp's CPU rule), "+kv8" / "+kv16" the KV cache in int8 / f16;
// w8a16 and w8a8 name rtn:8gch and rtn:8gch+a8. For each it prints: bytes of
// weights, bits per weight, the layer output error against RTN's (gptq / awq), decode
// tokens/s at batch 1 and 32, prefill tokens/s, perplexity over a real English text (as
// llama-perplexity computes it), and mean KL / top-1 agreement against the reference.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lio/cli_common.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/perplexity.h"
#include "lio/quantize.h"
#include "variant_eval.h"

namespace {
using json = nlohmann::ordered_json;

/// Settings of one ch03_quantization run.
struct Settings {
  std::string reference = "models/SmolLM2-135M-Instruct.F32.gguf";
  std::string variants =
      "f32,f32+kv16,f32+kv8,q8_0,q8_0+a8b,w8a16,w8a8,smoothquant:8gch+a8,q4_1,q4_0,gptq:4g32,awq:4g32,rtn:4g128,"
      "gptq:4g128,awq:4g128,rtn:3g128,gptq:3g128,awq:3g128";
  std::string files;
  std::string text = "/usr/share/common-licenses/GPL-3";
  int64_t ppl_ctx = 512, ppl_chunks = 4, eval_tokens = 256, context = 256, prefill_tokens = 256;
  int steps = 5;
  std::string device = "cpu";
  std::string keep = "q8_0:token_embd";  // lio quantize --keep for every variant made here
  std::string calib = "/usr/share/common-licenses/GFDL-1.3";
  int64_t calib_ctx = 512, calib_chunks = 8;
  bool skip_speed = false;
  bool llama_blocks = false;  // 3-bit variants in Q4_0 / Q4_1 (llama.cpp reads them) instead of Q3_0 / Q3_1
  std::string out_dir;  // keep the variants made here in this directory (else a temporary one)
};

/// A variant: where its file is and, for gptq / awq, their output error against RTN's.
struct Variant {
  std::string path;                ///< the GGUF file
  std::string grid = "-";          ///< "int4 g32 sym", or "-" for the reference and --files
  double error_ratio = -1.0;       ///< gptq / awq: output error / RTN's (-1: not calibrated)
};

/// Median seconds of `reps` prefills of `tokens` from an empty cache, as tokens/s.
double prefill_tokens_per_s(const lio::LoadedModel& m, const std::vector<int32_t>& tokens, lio::Device device,
                            int reps, const lio::ch02::RunSettings& run) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t mib = (lio::kv_block_bytes(m.config, 16) * ((n + 15) / 16) >> 20) + 1;
  auto runner = lio::make_runner(m, device, lio::KvPoolOptions{16, mib, run.kv}, run.activations);
  std::vector<double> times;
  for (int r = -1; r < reps; ++r) {  // r = -1 warms up
    lio::SoloSequence seq(*runner, n);
    const auto t0 = std::chrono::steady_clock::now();
    seq.forward(tokens, /*all_logits=*/false);
    if (r >= 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return static_cast<double>(n) / times[times.size() / 2];
}

/// A variant's name split into its file's name and how it runs: "+a8" (per-token int8
/// activations, W8A8), "+a8b" (per-32-block int8), "+kv8" / "+kv16" (the KV cache in int8 /
/// f16), in any combination; w8a16 and w8a8 are rtn:8gch and rtn:8gch+a8.
std::pair<std::string, lio::ch02::RunSettings> split_run(const std::string& name) {
  std::string base = name.substr(0, name.find('+'));
  lio::ch02::RunSettings run;
  if (base == "w8a16" || base == "w8a8") {
    if (base == "w8a8") run.activations = lio::ActivationPrecision::Int8PerToken;
    base = "rtn:8gch";
  }
  for (size_t at = name.find('+'); at != std::string::npos;) {
    const size_t next = name.find('+', at + 1);
    const std::string suffix = name.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (suffix == "a8" || suffix == "a8b") {
      if (base == "f32") throw lio::InvalidArgument("--variants: " + name + ": f32 weights have no int8 kernel");
      run.activations = suffix == "a8" ? lio::ActivationPrecision::Int8PerToken : lio::ActivationPrecision::Int8;
    } else if (suffix == "kv8" || suffix == "kv16") {
      run.kv = suffix == "kv8" ? lio::KvCacheDType::Int8 : lio::KvCacheDType::F16;
    } else {
      throw lio::InvalidArgument("--variants: " + name + ": unknown suffix '+" + suffix +
                                 "' (want +a8 per-token int8 activations, +a8b per block, +kv8 / +kv16 the KV cache)");
    }
    at = next;
  }
  return {base, run};
}

/// --activations' spelling of `a`.
const char* activations_name(lio::ActivationPrecision a) {
  return a == lio::ActivationPrecision::Int8PerToken ? "int8-token" : a == lio::ActivationPrecision::Int8 ? "int8" : "f32";
}

/// Parses a variant's file name: q8_0 / q4_0 / q4_1 (RTN at llama.cpp's own grids), or
/// METHOD:BITS[a]gGROUP, e.g. gptq:4g128, awq:3ag64, rtn:4g32 ('a': asymmetric), rtn:8gch
/// (GROUP ch: per output channel).
lio::QuantizeOptions variant_options(const std::string& name) {
  lio::QuantizeOptions q;
  if (name == "q8_0") {
    q.bits = 8;
    return q;
  }
  if (name == "q4_0") return q;
  if (name == "q4_1") {
    q.asymmetric = true;
    return q;
  }
  const size_t colon = name.find(':');
  const size_t g = name.find('g', colon == std::string::npos ? 0 : colon);
  const auto bad = [&] {
    return lio::InvalidArgument("--variants: unknown variant '" + name +
                                "' (want f32, q8_0, q4_1, q4_0, w8a16, w8a8, or METHOD:BITS[a]gGROUP[+a8] such as "
                                "gptq:4g128, awq:3ag64, rtn:8gch+a8)");
  };
  if (colon == std::string::npos || g == std::string::npos) throw bad();
  q.method = name.substr(0, colon);
  std::string bits = name.substr(colon + 1, g - colon - 1);
  if (!bits.empty() && bits.back() == 'a') {
    q.asymmetric = true;
    bits.pop_back();
  }
  try {
    size_t used = 0;
    q.bits = std::stoi(bits, &used);
    if (used != bits.size()) throw bad();
    const std::string group = name.substr(g + 1);
    if (group == "ch") {
      q.group_size = lio::kPerChannel;
    } else {
      q.group_size = std::stoll(group, &used);
      if (used != group.size()) throw bad();
    }
  } catch (const std::logic_error&) {
    throw bad();
  }
  return q;
}

/// The lio quantize options of the file of variant `name` under `s`; throws as
/// quantize_target for bad ones.
lio::QuantizeOptions quantize_options(const std::string& name, const Settings& s) {
  lio::QuantizeOptions q = variant_options(split_run(name).first);
  q.keep = lio::parse_keep(s.keep);
  q.calib_path = s.calib;
  q.calib_ctx = s.calib_ctx;
  q.calib_chunks = s.calib_chunks;
  q.llama_blocks = s.llama_blocks;
  lio::quantize_target(q);
  return q;
}

/// Makes variant `name` from the reference with lio quantize (in `dir`), or returns the
/// reference itself (f32).
/// Variants share a file when their names differ only in the activations (w8a16, w8a8): the
/// second reuses the first's (`made`: file name -> Variant).
Variant make_variant(const std::string& name, const Settings& s, const std::string& dir,
                     std::map<std::string, Variant>& made) {
  const std::string base = split_run(name).first;
  if (base == "f32") return {s.reference};
  if (const auto it = made.find(base); it != made.end()) return it->second;
  const lio::QuantizeOptions q = quantize_options(name, s);
  std::string file = base;
  std::replace(file.begin(), file.end(), ':', '-');
  Variant v{dir + "/" + file + ".gguf", lio::quantize_grid(q).name()};
  const lio::QuantizeReport r = lio::quantize_gguf(s.reference, v.path, q);
  if (q.method != "rtn" && r.output_error_rtn > 0) v.error_ratio = r.output_error / r.output_error_rtn;
  made[base] = v;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Chapter 03: the course model at several weight formats: memory, speed, quality", "ch03_quantization"};
  Settings s;
  int threads = 0;
  bool json_out = false;
  app.add_option("--reference", s.reference, "The reference model (f32): variants are made from it and compared to it")
      ->capture_default_str();
  app.add_option("--variants", s.variants,
                 "Comma-separated: f32 (the reference); q8_0, q4_1, q4_0 (RTN at llama.cpp's grids); "
                 "METHOD:BITS[a]gGROUP with METHOD rtn|gptq|awq, BITS 8|4|3, 'a' asymmetric, GROUP "
                 "32|64|128|ch (per channel); any of them (f32 too for +kv) with +a8 (W8A8: per-token "
                 "int8 activations), +a8b (per block), +kv8 / +kv16 (KV cache in int8 / f16); "
                 "w8a16 = rtn:8gch, w8a8 = rtn:8gch+a8")
      ->capture_default_str();
  app.add_option("--keep", s.keep, "lio quantize --keep for the variants made here (\"\": quantize everything)")
      ->capture_default_str();
  app.add_option("--calib", s.calib, "Calibration text for gptq / awq (not the evaluation text)")->capture_default_str();
  app.add_option("--calib-ctx", s.calib_ctx, "Calibration tokens per chunk")->capture_default_str();
  app.add_option("--calib-chunks", s.calib_chunks, "Calibration chunks (-1: the whole text)")->capture_default_str();
  app.add_option("--out-dir", s.out_dir, "Write the variants made here to this directory and keep them "
                 "(e.g. for bench/03_quantization/check_perplexity.sh)");
  app.add_flag("--llama-blocks", s.llama_blocks,
               "Store 3-bit variants in llama.cpp's Q4_0 / Q4_1 blocks (4-bit memory; llama.cpp runs the files) "
               "instead of LIO's packed Q3_0 / Q3_1");
  app.add_flag("--skip-speed", s.skip_speed, "Measure quality only (speed depends on the container, not the method)");
  app.add_option("--files", s.files, "Comma-separated GGUF files to compare as they are (e.g. the shipped Q4_1, or "
                 "llama.cpp's Q4_K_M); the run suffixes of --variants apply (FILE.gguf+a8b)");
  app.add_option("--text", s.text, "Real English text for perplexity and KL")->capture_default_str();
  app.add_option("--ppl-ctx", s.ppl_ctx, "Perplexity chunk size (llama-perplexity's -c)")->capture_default_str();
  app.add_option("--ppl-chunks", s.ppl_chunks, "Perplexity chunks (-1: all)")->capture_default_str();
  app.add_option("--eval-tokens", s.eval_tokens, "Tokens of the text for mean KL and top-1 agreement")
      ->capture_default_str();
  app.add_option("--context", s.context, "Context length of the decode-speed measurement")->capture_default_str();
  app.add_option("--prefill-tokens", s.prefill_tokens, "Prompt length of the prefill-speed measurement")
      ->capture_default_str();
  app.add_option("--steps", s.steps, "Timed decode steps / prefills (median)")->capture_default_str();
  app.add_option("--device", s.device, "cpu|cuda: where the speed measurements run")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all)");
  app.add_flag("--json", json_out, "Print one JSON object");

  return lio::run_main(app, argc, argv, [&]() -> int {
    lio::apply_threads(threads);
    const lio::Device device = lio::parse_device(s.device);
    if (s.eval_tokens < 2 || s.prefill_tokens < 1 || s.steps < 1) {
      throw lio::InvalidArgument("--eval-tokens must be >= 2, --prefill-tokens and --steps >= 1");
    }
    std::ifstream in(s.text, std::ios::binary);
    if (!in) throw lio::InvalidArgument("--text: cannot read '" + s.text + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    const lio::LoadedModel ref = lio::load_model(s.reference, lio::WeightMode::AsStored);
    const bool add_bos = ref.tokenizer->add_bos_default();
    const std::vector<int32_t> text = ref.tokenizer->encode(ss.str(), /*parse_special=*/false, add_bos);
    if (static_cast<int64_t>(text.size()) < std::max(s.eval_tokens, s.prefill_tokens)) {
      throw lio::InvalidArgument("--text has " + std::to_string(text.size()) + " tokens; --eval-tokens and " +
                                 "--prefill-tokens need " + std::to_string(std::max(s.eval_tokens, s.prefill_tokens)));
    }
    const std::vector<int32_t> eval(text.begin(), text.begin() + s.eval_tokens);
    const std::vector<int32_t> prompt(text.begin(), text.begin() + s.prefill_tokens);
    const lio::ch02::ReferenceLogprobs ref_lp = lio::ch02::reference_logprobs(ref, eval);
    const bool keep_files = !s.out_dir.empty();
    const std::string dir =
        keep_files ? s.out_dir
                   : (std::filesystem::temp_directory_path() / ("lio_ch03_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    std::vector<std::pair<std::string, std::string>> runs;  // (name, path)
    for (const std::string& v : lio::ch02::split_commas(s.variants)) {
      if (split_run(v).first != "f32") quantize_options(v, s);  // a bad name fails before any work
      runs.emplace_back(v, "");
    }
    for (const std::string& f : lio::ch02::split_commas(s.files)) {  // a file may carry run suffixes too
      const std::string file = split_run(f).first;
      runs.emplace_back(std::filesystem::path(file).filename().string() + f.substr(file.size()), file);
    }

    const std::string device_name = lio::ch02::describe_device(ref, device);
    if (!json_out) {
      std::printf("reference %s | text %s (%zu tokens) | perplexity: chunks of %lld, %lld chunks | KL over %lld "
                  "tokens | decode at context %lld | prefill of %lld tokens | %s\n\n",
                  s.reference.c_str(), s.text.c_str(), text.size(), (long long)s.ppl_ctx, (long long)s.ppl_chunks,
                  (long long)s.eval_tokens, (long long)s.context, (long long)s.prefill_tokens, device_name.c_str());
      std::printf("%-24s %-36s %10s %6s %9s %9s %10s %10s %11s %10s %10s %7s\n", "variant", "grid", "weight MiB",
                  "bits/w", "KV B/tok", "err/RTN", "decode b1", "decode b32", "prefill t/s", "perplexity", "mean KL",
                  "top-1");
    }
    json rows = json::array();
    std::map<std::string, Variant> made;
    try {
      for (auto& [name, path] : runs) {
        Variant v{path};
        const lio::ch02::RunSettings run = split_run(name).second;
        const lio::ActivationPrecision act = run.activations;
        if (path.empty()) v = make_variant(name, s, dir, made);
        if (act == lio::ActivationPrecision::Int8PerToken) v.grid += " a8/token";
        if (act == lio::ActivationPrecision::Int8) v.grid += " a8/32";
        if (run.kv != lio::KvCacheDType::F32) v.grid += std::string(" kv ") + lio::kv_cache_dtype_name(run.kv);
        path = v.path;
        const lio::LoadedModel m = lio::load_model(path, lio::WeightMode::AsStored);
        if (m.config.vocab_size != ref.config.vocab_size) {
          throw lio::InvalidArgument(path + ": vocabulary differs from the reference's");
        }
        int64_t n_params = 0;
        bool any_quantized = false;  // int8 activations need quantized matrices to act on
        for (const lio::LayerWeights& L : m.weights.layers) {
          for (const lio::WeightMatrix& w :
               L.matrices) {  // the layer's matrices (empty where absent)
            n_params += w.rows * w.cols;
            any_quantized = any_quantized || lio::dtype_info(w.dtype).block_elems > 1;
          }
        }
        if (act != lio::ActivationPrecision::F32 && !any_quantized) {
          throw lio::InvalidArgument(name + ": int8 activations (+a8 / +a8b) need quantized weights, and " + path +
                                     " holds none (f32 / f16 / bf16 matrices keep f32 activations)");
        }
        n_params += m.weights.token_embd.rows * m.weights.token_embd.cols;
        auto runner = lio::make_runner(m, lio::Device::Cpu, lio::KvPoolOptions{16, 64, run.kv}, act);
        // The format's bytes as stored (matrices and embedding; a tied head once), not the
        // backend's packed copies, which add a second copy of the head (engine.md).
        int64_t bytes = m.weights.size_bytes() - static_cast<int64_t>(m.weights.output_norm.size() * sizeof(float));
        for (const auto& L : m.weights.layers) bytes -= static_cast<int64_t>(L.vector_floats() * sizeof(float));
        const lio::PerplexityResult ppl =
            lio::perplexity(*runner, text, add_bos ? ref.tokenizer->bos_id() : -1, s.ppl_ctx, s.ppl_chunks);
        runner.reset();
        const lio::ch02::Quality q = lio::ch02::evaluate_quality(m, ref_lp, run);
        double b1 = 0, b32 = 0, pf = 0;
        if (!s.skip_speed) {
          b1 = lio::ch02::decode_tokens_per_s(m, s.context, 1, s.steps, device, run);
          b32 = lio::ch02::decode_tokens_per_s(m, s.context, 32, s.steps, device, run);
          pf = prefill_tokens_per_s(m, prompt, device, s.steps, run);
        }
        const int64_t kv_bytes_per_token = 2 * m.config.n_layers * lio::kv_slot_bytes(m.config, run.kv);
        const double bpw = 8.0 * static_cast<double>(bytes) / static_cast<double>(n_params);
        if (!json_out) {
          const auto cell = [](double v, const char* fmt) {
            char buf[32];
            std::snprintf(buf, sizeof buf, fmt, v);
            return v > 0 ? std::string(buf) : std::string("-");
          };
          std::printf("%-24s %-36s %10.1f %6.2f %9lld %9s %10s %10s %11s %10.4f %10.5f %6.1f%%\n", name.c_str(),
                      v.grid.c_str(), static_cast<double>(bytes) / (1 << 20), bpw, (long long)kv_bytes_per_token,
                      cell(v.error_ratio, "%.3f").c_str(),
                      cell(b1, "%.1f").c_str(), cell(b32, "%.1f").c_str(), cell(pf, "%.1f").c_str(), ppl.ppl,
                      q.mean_kl, 100.0 * q.top1_agreement);
          std::fflush(stdout);
        }
        rows.push_back(json{{"variant", name},
                            {"grid", v.grid},
                            {"activations", activations_name(act)},
                            {"kv_cache_dtype", lio::kv_cache_dtype_name(run.kv)},
                            {"kv_bytes_per_token", kv_bytes_per_token},
                            {"output_error_vs_rtn", v.error_ratio > 0 ? json(v.error_ratio) : json(nullptr)},
                            {"file", path},
                            {"weight_bytes", bytes},
                            {"bits_per_weight", bpw},
                            {"decode_tokens_per_s_b1", s.skip_speed ? json(nullptr) : json(b1)},
                            {"decode_tokens_per_s_b32", s.skip_speed ? json(nullptr) : json(b32)},
                            {"prefill_tokens_per_s", s.skip_speed ? json(nullptr) : json(pf)},
                            {"perplexity", ppl.ppl},
                            {"perplexity_uncertainty", ppl.ppl_uncertainty},
                            {"mean_kl", q.mean_kl},
                            {"top1_agreement", q.top1_agreement}});
      }
    } catch (...) {
      if (!keep_files) std::filesystem::remove_all(dir);
      throw;
    }
    if (!keep_files) std::filesystem::remove_all(dir);
    if (json_out) {
      std::cout << json{{"reference", s.reference}, {"text", s.text},       {"text_tokens", text.size()},
                        {"ppl_ctx", s.ppl_ctx},     {"ppl_chunks", s.ppl_chunks}, {"eval_tokens", s.eval_tokens},
                        {"context", s.context},     {"prefill_tokens", s.prefill_tokens}, {"device", device_name},
                        {"keep", s.keep},           {"calib", s.calib},           {"calib_ctx", s.calib_ctx},
                        {"calib_chunks", s.calib_chunks},
                        {"variants", rows}}
                       .dump(2)
                << "\n";
    } else {
      std::printf("\nbits/w counts every matrix weight and the embedding (norms excluded) as stored (3-bit codes "
                  "sit in 4-bit blocks); KV B/tok: bytes of K and V per token over all layers; err/RTN: the "
                  "summed layer output error tr((W-Q) X^T X (W-Q)^T) over the "
                  "calibration text, GPTQ's or AWQ's over RTN's on the same grid; perplexity as llama-perplexity "
                  "computes it; KL(P_reference || P_variant) in nats. Variants made here keep %s.\n",
                  s.keep.empty() ? "nothing" : s.keep.c_str());
    }
    return 0;
  });
}
