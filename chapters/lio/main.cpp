// lio — the engine's command-line front door.
//   lio info      model metadata, tensor table, parameter count, weight bytes
//   lio tokenize  text -> token ids
//   lio generate  prompt (or --chat) -> streamed text
//   lio logits    teacher-forced logits for given token ids (for conformance tests)
//   lio batch     a JSONL file of requests through one engine (offline batched generation)
//   lio perplexity  perplexity over a text file, as llama-perplexity computes it
//   lio quantize  rewrite a GGUF's weight matrices at 8, 4 or 3 bits (RTN, GPTQ, AWQ; llama.cpp blocks)
//   lio spec-data self-distillation data for trained drafters: tokens + hidden states (issue 63)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <tuple>
#include <nlohmann/json.hpp>
#include <sstream>

#include "batch.h"
#include "spec_data.h"
#include "lio/architecture.h"
#include "lio/atomic_file.h"
#include "lio/cli_common.h"
#include "lio/error.h"
#include "lio/generate.h"
#include "lio/gguf.h"
#include "lio/model_runner.h"
#include "lio/perplexity.h"
#include "lio/quantize.h"
#include "lio/safetensors.h"

namespace {
using json = nlohmann::ordered_json;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

/// Short printable form of a GGUF metadata value (arrays summarized by length).
json gguf_value_json(const lio::GgufValue& v) {
  return std::visit(
      [&](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::shared_ptr<lio::GgufArray>>) {
          json arr = json::array();
          const size_t n = x ? x->items.size() : 0;
          if (n > 16) return "[array of " + std::to_string(n) + " items]";
          for (size_t i = 0; i < n; ++i) arr.push_back(gguf_value_json(x->items[i]));
          return arr;
        } else {
          return x;
        }
      },
      v.data);
}

/// `lio info --families`: the decoder families LIO runs (lio/architecture.h), no model needed.
int cmd_families(bool as_json) {
  json list = json::array();
  for (const lio::Architecture* a : lio::architectures()) {
    json tensors = json::array();  // the family's table: one entry per layer tensor
    for (const lio::TensorSpec& t : a->tensors) {
      tensors.push_back(
          {{"kind", std::string(lio::weight_kind_name(t.kind))},
           {"gguf", "blk.N." + std::string(t.gguf)},
           {"hf", t.hf.empty() ? std::string() : "model.layers.N." + std::string(t.hf)},
           {"optional", t.optional}});
    }
    list.push_back({{"architecture", std::string(a->name)},
                    {"summary", std::string(a->summary)},
                    {"rope_style", a->rope_style == lio::RopeStyle::Normal ? "normal" : "neox"},
                    {"tensors", tensors}});
  }
  if (as_json) {
    std::cout << json{{"architectures", list}}.dump(2) << "\n";
    return 0;
  }
  std::printf("decoder families (GGUF general.architecture):\n");
  for (const auto& a : list) {
    std::printf("  %-8s %s\n", a["architecture"].get<std::string>().c_str(), a["summary"].get<std::string>().c_str());
    std::string names;  // the GGUF names of its layer tensors, from the family's table
    for (const auto& t : a["tensors"])
      names += (names.empty() ? "" : " ") + t["gguf"].get<std::string>().substr(6);
    std::printf("  %-8s   blk.N.{%s}\n", "", names.c_str());
  }
  return 0;
}

int cmd_info(const lio::CommonOptions& o) {
  lio::LoadedModel m = lio::load_from_options(o);
  const lio::ModelConfig& c = m.config;
  json j;
  j["model"] = m.path;
  j["format"] = m.format;
  j["architecture"] = c.architecture;
  j["supported_architectures"] = lio::architecture_names();
  j["name"] = c.name;
  j["config"] = {{"n_layers", c.n_layers},         {"d_model", c.d_model},
                 {"n_heads", c.n_heads},           {"n_kv_heads", c.n_kv_heads},
                 {"head_dim", c.head_dim},         {"d_ff", c.d_ff},
                 {"vocab_size", c.vocab_size},     {"context_length", c.context_length},
                 {"rope_theta", c.rope_theta},     {"rms_norm_eps", c.rms_norm_eps},
                 {"rope_style", c.rope_style == lio::RopeStyle::Normal ? "normal" : "neox"},
                 {"tied_embeddings", c.tied_embeddings},
                 {"sliding_window", c.sliding_window},
                 {"sliding_window_pattern", c.sliding_window_pattern}};
  // The family scalars (lio/model_config.h), shown where they differ from llama's defaults.
  const lio::ModelConfig llama;
  const std::tuple<const char*, float, float> scalars[] = {
      {"embedding_scale", c.embedding_scale, llama.embedding_scale},
      {"attn_scale", c.attn_scale, llama.attn_scale},
      {"attn_softcap", c.attn_softcap, llama.attn_softcap},
      {"final_softcap", c.final_softcap, llama.final_softcap},
      {"residual_scale", c.residual_scale, llama.residual_scale},
      {"logit_scale", c.logit_scale, llama.logit_scale}};
  for (const auto& [key, value, plain] : scalars)
    if (value != plain) j["config"][key] = value;
  int64_t windowed = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) windowed += c.layer_window(l) > 0 ? 1 : 0;
  j["windowed_layers"] = windowed;
  j["n_params"] = m.weights.n_params();
  j["weight_bytes"] = m.weights.size_bytes();
  j["kv_bytes_per_token_f32"] = c.kv_bytes_per_token(4);
  json tensors = json::array();
  json meta = json::object();
  if (m.format == "gguf") {
    lio::GgufFile f = lio::GgufFile::open(m.path);
    j["gguf_version"] = f.version();
    for (const auto& [k, v] : f.metadata()) meta[k] = gguf_value_json(v);
    for (const auto& t : f.tensors())
      tensors.push_back({{"name", t.name}, {"type", std::string(lio::dtype_info(t.dtype).name)},
                         {"shape", t.shape}, {"bytes", t.size_bytes}});
  } else {
    lio::SafetensorsSet s = lio::SafetensorsSet::open_dir(m.path);
    for (const auto& [name, t] : s.tensors())
      tensors.push_back({{"name", name}, {"type", t.dtype_name}, {"shape", t.shape}, {"bytes", t.size_bytes}});
  }
  j["metadata"] = meta;
  j["tensors"] = tensors;
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model        %s (%s)\n", m.path.c_str(), m.format.c_str());
  std::printf("name         %s, architecture %s (LIO runs: %s)\n", c.name.c_str(), c.architecture.c_str(),
              lio::architecture_names().c_str());
  std::printf("layers %lld, d_model %lld, heads %lld (kv %lld), head_dim %lld, d_ff %lld, vocab %lld, ctx %lld\n",
              (long long)c.n_layers, (long long)c.d_model, (long long)c.n_heads, (long long)c.n_kv_heads,
              (long long)c.head_dim, (long long)c.d_ff, (long long)c.vocab_size, (long long)c.context_length);
  std::printf("rope theta %.1f (%s), rms eps %.2e, tied embeddings %s\n", c.rope_theta,
              c.rope_style == lio::RopeStyle::Normal ? "normal" : "neox", c.rms_norm_eps,
              c.tied_embeddings ? "yes" : "no");
  std::printf("parameters   %lld (%.1f M)\n", (long long)m.weights.n_params(), m.weights.n_params() / 1e6);
  std::printf("weight bytes %lld (%.1f MiB)\n", (long long)m.weights.size_bytes(),
              m.weights.size_bytes() / 1048576.0);
  std::printf("KV bytes/token (f32) %lld\n", (long long)c.kv_bytes_per_token(4));
  if (windowed > 0)
    std::printf("sliding window %lld keys on %lld of %lld layers\n", (long long)c.sliding_window, (long long)windowed,
                (long long)c.n_layers);
  std::printf("\nmetadata:\n");
  for (const auto& [k, v] : meta.items()) {
    std::string s = v.dump();
    if (s.size() > 100) s = s.substr(0, 97) + "...";
    std::printf("  %-44s %s\n", k.c_str(), s.c_str());
  }
  std::printf("\ntensors (%zu):\n", tensors.size());
  for (const auto& t : tensors)
    std::printf("  %-32s %-5s %-14s %10lld bytes\n", t["name"].get<std::string>().c_str(),
                t["type"].get<std::string>().c_str(), shape_str(t["shape"].get<std::vector<int64_t>>()).c_str(),
                (long long)t["bytes"].get<int64_t>());
  return 0;
}

int cmd_tokenize(const lio::CommonOptions& o, bool no_special) {
  const std::string path = o.model.empty() ? lio::default_model_path() : o.model;
  std::unique_ptr<lio::Tokenizer> tok = lio::load_tokenizer(path);
  std::vector<int32_t> ids = tok->encode(o.prompt, !no_special, tok->add_bos_default());
  if (o.json) {
    std::cout << json{{"ids", ids}}.dump() << "\n";
    return 0;
  }
  for (int32_t id : ids) std::printf("%6d  %s\n", id, json(tok->token_text(id)).dump().c_str());
  return 0;
}

/// `lio chat-template`: renders `messages_json` (a JSON array of {"role", "content"} strings)
/// with a Jinja chat template: the file `template_path` if given, else the model's own
/// (tokenizer.chat_template); bos_token / eos_token are the model's BOS / EOS texts, or
/// `bos` / `eos` without a model. Prints the rendered text exactly (with --json:
/// {"text": ...}). Throws InvalidArgument for messages that are not such an array, an
/// unreadable template file, a template that fails to parse or raises; UnsupportedError
/// when the model has no template and none is given.
int cmd_chat_template(const std::string& model, const std::string& template_path, const std::string& messages_json,
                      bool generation_prompt, std::string bos, std::string eos, bool as_json) {
  std::vector<lio::ChatMessage> messages;
  try {
    const json list = json::parse(messages_json);
    if (!list.is_array()) throw lio::InvalidArgument("--messages must be a JSON array");
    for (const json& m : list) {
      if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
          !m["content"].is_string()) {
        throw lio::InvalidArgument("--messages: each message must be {\"role\": string, \"content\": string}");
      }
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
  } catch (const json::exception& e) {
    throw lio::InvalidArgument(std::string("--messages is not JSON: ") + e.what());
  }
  std::string tmpl;
  std::unique_ptr<lio::Tokenizer> tok;
  if (!model.empty()) {
    tok = lio::load_tokenizer(model);
    tmpl = tok->chat_template();
    if (tok->bos_id() >= 0) bos = tok->token_text(tok->bos_id());
    if (tok->eos_id() >= 0) eos = tok->token_text(tok->eos_id());
  }
  if (!template_path.empty()) {
    std::ifstream in(template_path, std::ios::binary);
    if (!in) throw lio::InvalidArgument("cannot open --template " + template_path);
    tmpl.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string text = lio::render_chat_template(tmpl, messages, generation_prompt, {bos, eos});
  if (as_json) {
    std::cout << json{{"text", text}}.dump() << "\n";
  } else {
    std::cout << text;
  }
  return 0;
}

/// `lio generate`: the prompt through generate() on the runner the flags choose, streamed (or one
/// JSON summary with --json). With warmup_runs > 0, first runs generate() that many times, untimed
/// and unprinted, on lio::warmup_prompt (same length, no shared prefix) with the same options, so
/// the timed run finds the kernels loaded, the allocations made and the caches warm, as
/// llama-bench's warm-up run does; each generate() builds its own Engine and runs no prefix cache,
/// so nothing of the warm-up's prompt can serve the timed one (--json reports prefix_cache_hits).
/// `lio generate`'s structured-output flags (lio/grammar.h): at most one of them.
struct StructuredOutputFlags {
  std::string json_schema_file;  ///< --json-schema FILE: a JSON schema
  bool json_object = false;      ///< --json-object: any JSON object
  std::string grammar_file;      ///< --grammar FILE: an EBNF grammar (xgrammar's GBNF dialect)
};

void add_structured_output_flags(CLI::App& app, StructuredOutputFlags& f) {
  auto* schema = app.add_option("--json-schema", f.json_schema_file,
                                "Constrain the output to this JSON schema (a file; OpenAI's response_format json_schema)");
  auto* object = app.add_flag("--json-object", f.json_object,
                              "Constrain the output to a JSON object (OpenAI's response_format json_object)");
  auto* grammar = app.add_option("--grammar", f.grammar_file,
                                 "Constrain the output to this EBNF grammar (a file; root rule 'root', GBNF-like)");
  schema->excludes(object)->excludes(grammar);
  object->excludes(grammar);
}

/// The GrammarSpec the flags ask for (kind None when none). Throws InvalidArgument when a
/// file cannot be read.
lio::GrammarSpec structured_output_spec(const StructuredOutputFlags& f) {
  const auto read = [](const std::string& path, const char* flag) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw lio::InvalidArgument(std::string(flag) + ": cannot open " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (!f.json_schema_file.empty()) return {lio::GrammarSpec::Kind::JsonSchema, read(f.json_schema_file, "--json-schema")};
  if (!f.grammar_file.empty()) return {lio::GrammarSpec::Kind::Ebnf, read(f.grammar_file, "--grammar")};
  if (f.json_object) return {lio::GrammarSpec::Kind::JsonObject, ""};
  return {};
}

int cmd_generate(const lio::CommonOptions& o, bool ignore_eos, int64_t warmup_runs,
                 const StructuredOutputFlags& structured) {
  if (warmup_runs < 0) throw lio::InvalidArgument("--warmup must be >= 0, got " + std::to_string(warmup_runs));
  lio::apply_threads(o.threads);
  lio::parse_spec_method(o.spec_method);  // a bad flag fails before the model loads
  lio::LoadedModel m = lio::load_from_options(o);
  const lio::SpeculativeConfig spec = lio::speculative_from_options(m, o);
  std::vector<int32_t> prompt = lio::prompt_tokens(m, o);
  std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, o);
  if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
  lio::DraftRunner draft = lio::draft_from_options(m, *runner, o, spec);
  lio::GenerateOptions g;
  g.max_tokens = o.max_tokens;
  g.stop = o.stop;
  g.sampler = o.sampler;
  g.speculative = spec;
  g.draft = draft.runner.get();
  g.ignore_eos = ignore_eos;
  g.enforce_eager = o.enforce_eager;
  if (const lio::GrammarSpec spec_g = structured_output_spec(structured); spec_g.kind != lio::GrammarSpec::Kind::None) {
    g.grammar = lio::GrammarCompiler(*m.tokenizer, m.config.vocab_size).compile(spec_g);
  }
  std::vector<double> warmup_ms;
  if (warmup_runs > 0) {
    const std::vector<int32_t> warmup = lio::warmup_prompt(prompt, m.config.vocab_size);
    for (int64_t i = 0; i < warmup_runs; ++i) {
      warmup_ms.push_back(lio::generate(*runner, *m.tokenizer, warmup, g).total_ms);
    }
  }
  auto stream = [&](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  lio::GenerateResult r = lio::generate(*runner, *m.tokenizer, prompt, g,
                                        o.json ? lio::TextCallback{} : lio::TextCallback{stream});
  if (o.json) {
    json j = lio::generate_result_json(r);
    j["device"] = runner->device_description();
    j["warmup_runs"] = warmup_runs;
    j["warmup_ms"] = warmup_ms;
    j["prefix_cache_hits"] = r.prefix_cache_hits;
    // Typical acceptance is lossy when sampling: the summary says which rule accepted the drafts.
    if (spec.method != lio::SpecMethod::None)
      j["spec_acceptance"] = spec.acceptance == lio::SpecAcceptance::Typical ? "typical" : "rejection";
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the answer's last line before the summary, also when both go to one file
    const lio::KvPool& pool = runner->kv_pool();
    std::fprintf(stderr,
                 "[%lld prompt tokens, %zu generated (%s); TTFT %.1f ms, TPOT %.2f ms, %.1f tok/s; %s, KV pool "
                 "%.0f MiB = %lld blocks x %lld tokens, %s]\n",
                 (long long)r.n_prompt_tokens, r.token_ids.size(), lio::finish_reason_name(r.finish_reason),
                 r.ttft_ms, r.tpot_ms, r.tokens_per_s, runner->device_description().c_str(),
                 static_cast<double>(pool.size_bytes()) / (1 << 20), (long long)pool.n_blocks(),
                 (long long)pool.block_size(), lio::kv_cache_dtype_name(pool.dtype()));
    if (warmup_runs > 0) {
      std::fprintf(stderr, "[%lld untimed warm-up runs first (another prompt of the same length), %.1f ms in all]\n",
                   static_cast<long long>(warmup_runs), std::accumulate(warmup_ms.begin(), warmup_ms.end(), 0.0));
    }
    if (r.spec_num_drafts > 0) {
      std::fprintf(stderr, "[speculative %s: %lld drafted, %lld accepted (acceptance rate %.3f), %.2f tokens per target pass]\n",
                   r.spec_method.c_str(), (long long)r.spec_num_draft_tokens, (long long)r.spec_num_accepted_tokens,
                   static_cast<double>(r.spec_num_accepted_tokens) / static_cast<double>(r.spec_num_draft_tokens),
                   1.0 + static_cast<double>(r.spec_num_accepted_tokens) / static_cast<double>(r.spec_num_drafts));
    }
  }
  return 0;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw lio::InvalidArgument("--ids must be comma-separated integers, got '" + item + "'");
    }
  }
  if (ids.empty()) throw lio::InvalidArgument("--ids is empty");
  return ids;
}

int cmd_logits(const lio::CommonOptions& o, const std::string& ids_text, const std::string& out_path) {
  lio::apply_threads(o.threads);
  lio::LoadedModel m = lio::load_from_options(o);
  std::vector<int32_t> ids = parse_ids(ids_text);
  if (static_cast<int64_t>(ids.size()) > m.config.context_length)
    throw lio::InvalidArgument("--ids has " + std::to_string(ids.size()) + " tokens; the context holds " +
                               std::to_string(m.config.context_length));
  lio::CommonOptions pool_o = o;  // one sequence of ids.size() tokens: one block holds it all
  pool_o.kv_pool = {static_cast<int64_t>(ids.size()),
                    (lio::kv_block_bytes(m.config, static_cast<int64_t>(ids.size())) >> 20) + 1};
  std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, pool_o);
  if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
  lio::SoloSequence seq(*runner, static_cast<int64_t>(ids.size()));
  std::span<const float> logits = seq.forward(ids, /*all_logits=*/true);
  lio::write_file_atomically(out_path, std::string_view(reinterpret_cast<const char*>(logits.data()),
                                                       logits.size_bytes()));
  json j{{"n_tokens", ids.size()}, {"vocab_size", m.config.vocab_size}, {"out", out_path}, {"dtype", "f32"},
         {"device", runner->device_description()}};
  std::cout << j.dump() << "\n";
  return 0;
}

/// `lio perplexity`: the text file tokenized with the model's BOS choice, then
/// lio::perplexity; prints llama-perplexity's running "[i]ppl," line and its final estimate
/// (or one JSON object with --json).
int cmd_perplexity(const lio::CommonOptions& o, const std::string& text_path, int64_t n_ctx, int64_t n_chunks) {
  lio::apply_threads(o.threads);
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw lio::InvalidArgument("--text: cannot read '" + text_path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  lio::LoadedModel m = lio::load_from_options(o);
  const bool add_bos = m.tokenizer->add_bos_default();
  const std::vector<int32_t> tokens = m.tokenizer->encode(ss.str(), /*parse_special=*/false, add_bos);
  lio::CommonOptions pool_o = o;  // one chunk at a time: one sequence of n_ctx tokens
  if (pool_o.kv_pool.kv_cache_mib == 0) {
    const int64_t blocks = (n_ctx + pool_o.kv_pool.block_size - 1) / std::max<int64_t>(pool_o.kv_pool.block_size, 1);
    pool_o.kv_pool.kv_cache_mib = ((lio::kv_block_bytes(m.config, pool_o.kv_pool.block_size) * blocks) >> 20) + 1;
  }
  std::unique_ptr<lio::ModelRunner> runner = lio::runner_from_options(m, pool_o);
  if (!runner) return 0;  // a worker rank, done serving the driver (chapter 08)
  const auto t0 = std::chrono::steady_clock::now();
  const lio::PerplexityResult r = lio::perplexity(
      *runner, tokens, add_bos ? m.tokenizer->bos_id() : -1, n_ctx, n_chunks, [&](int64_t i, double ppl) {
        if (!o.json) std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(i + 1), ppl);
      });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.json) {
    std::cout << json{{"model", m.path},
                      {"text", text_path},
                      {"device", runner->device_description()},
                      {"n_text_tokens", r.n_text_tokens},
                      {"n_ctx", r.n_ctx},
                      {"n_chunks", r.n_chunks},
                      {"n_scored", r.n_scored},
                      {"ppl", r.ppl},
                      {"ppl_uncertainty", r.ppl_uncertainty},
                      {"mean_nll", r.mean_nll},
                      {"running_ppl", r.running_ppl},
                      {"seconds", seconds}}
                     .dump()
              << "\n";
  } else {
    std::fprintf(stderr, "\n");
    std::printf("%s: %lld tokens, %lld chunks of %lld (%lld scored) on %s, %.1f s\n", text_path.c_str(),
                static_cast<long long>(r.n_text_tokens), static_cast<long long>(r.n_chunks),
                static_cast<long long>(r.n_ctx), static_cast<long long>(r.n_scored),
                runner->device_description().c_str(), seconds);
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_uncertainty);
  }
  return 0;
}

/// `lio quantize`: lio::quantize_gguf with a progress bar by decoder block on stderr, then a
/// summary (bytes before and after, bits per quantized weight).
int cmd_quantize(const std::string& in_path, const std::string& out_path, lio::QuantizeOptions q,
                 const std::string& keep, bool json_out) {
  q.keep = lio::parse_keep(keep);
  const lio::DType target = lio::quantize_target(q);  // bad options fail before any reading
  const auto t0 = std::chrono::steady_clock::now();
  const auto bar = [&](const char* what, int64_t done, int64_t total) {
    if (json_out) return;
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\rquantize %s %s [%s%s] %s %lld/%lld", q.method.c_str(),
                 std::string(lio::dtype_info(target).name).c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(), what, static_cast<long long>(done),
                 static_cast<long long>(total));
    if (done == total) std::fprintf(stderr, "\n");
  };
  const lio::QuantizeReport r = lio::quantize_gguf(
      in_path, out_path, q, [&](int64_t done, int64_t total) { bar("block", done, total); },
      [&](int64_t done, int64_t total) { bar("calibration chunk", done, total); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bpw = 8.0 * static_cast<double>(lio::dtype_row_bytes(target, 32)) / 32.0;
  if (json_out) {
    std::cout << json{{"in", in_path},          {"out", out_path},          {"type", lio::dtype_info(target).name},
                      {"bits_per_weight", bpw}, {"tensors", r.n_tensors},   {"quantized", r.n_quantized},
                      {"params_quantized", r.params_quantized},              {"bytes_in", r.bytes_in},
                      {"bytes_out", r.bytes_out}, {"seconds", seconds}, {"method", q.method},
                      {"grid", lio::quantize_grid(q).name()}, {"calib_tokens", r.calib_tokens},
                      {"output_error_rtn", r.output_error_rtn}, {"output_error", r.output_error}}
                     .dump()
              << "\n";
  } else {
    std::printf("%s -> %s: %lld tensors, %lld matrices (%.1fM weights) to %s (%.2f bits/weight); tensor bytes "
                "%.1f MiB -> %.1f MiB; %.1f s\n",
                in_path.c_str(), out_path.c_str(), static_cast<long long>(r.n_tensors),
                static_cast<long long>(r.n_quantized), static_cast<double>(r.params_quantized) / 1e6,
                std::string(lio::dtype_info(target).name).c_str(), bpw, static_cast<double>(r.bytes_in) / (1 << 20),
                static_cast<double>(r.bytes_out) / (1 << 20), seconds);
    if (q.method != "rtn") {
      std::printf("%s over %lld calibration tokens: output error %.4g, RTN's %.4g (ratio %.3f)\n", q.method.c_str(),
                  static_cast<long long>(r.calib_tokens), r.output_error, r.output_error_rtn,
                  r.output_error_rtn > 0 ? r.output_error / r.output_error_rtn : 1.0);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LIO inference engine: inspect a model, tokenize, generate", "lio"};
  app.require_subcommand(1);
  lio::CommonOptions info_o, tok_o, gen_o, log_o;

  CLI::App* info = app.add_subcommand("info", "Model metadata, tensor table, parameter count, weight bytes");
  lio::add_model_flags(*info, info_o);
  bool info_families = false;
  info->add_flag("--families", info_families,
                 "List the decoder families (general.architecture values) LIO runs, without loading a model");

  CLI::App* tokenize = app.add_subcommand("tokenize", "Text -> token ids");
  bool no_special = false;
  tokenize->add_option("--model", tok_o.model, "A .gguf file, HF directory or tokenizer.json");
  tokenize->add_option("--prompt", tok_o.prompt, "Text to tokenize")->required();
  tokenize->add_flag("--no-special", no_special, "Treat special-token text as plain text");
  tokenize->add_flag("--json", tok_o.json, "Print {\"ids\": [...]}");

  CLI::App* chat_tmpl = app.add_subcommand(
      "chat-template", "Render a conversation with a Jinja chat template (the model's own, or --template)");
  std::string ct_model, ct_template, ct_messages, ct_bos, ct_eos;
  bool ct_no_generation_prompt = false, ct_json = false;
  chat_tmpl->add_option("--model", ct_model, "A .gguf file, HF directory or tokenizer.json: its template, BOS and EOS");
  chat_tmpl->add_option("--template", ct_template, "A Jinja template file, used instead of the model's");
  chat_tmpl->add_option("--messages", ct_messages, "The conversation: a JSON array of {\"role\", \"content\"}")
      ->required();
  chat_tmpl->add_flag("--no-generation-prompt", ct_no_generation_prompt,
                      "Render add_generation_prompt = false (no assistant header at the end)");
  chat_tmpl->add_option("--bos-token", ct_bos, "bos_token's text without --model");
  chat_tmpl->add_option("--eos-token", ct_eos, "eos_token's text without --model");
  chat_tmpl->add_flag("--json", ct_json, "Print {\"text\": ...}");

  CLI::App* gen = app.add_subcommand("generate", "Generate text from a prompt, streaming it");
  lio::add_model_flags(*gen, gen_o);
  gen_o.activations = "auto";  // issue 44: the serving commands' default, chosen by measurement
  lio::add_device_flag(*gen, gen_o);
  lio::add_kv_pool_flags(*gen, gen_o, /*engine=*/true);
  gen_o.sampler.top_p = 0.9f;  // SmolLM2's model card suggests temperature 0.2, top_p 0.9
  lio::add_generation_flags(*gen, gen_o, /*default_temperature=*/0.2f);
  lio::add_speculative_flags(*gen, gen_o);
  bool gen_ignore_eos = false;
  gen->add_flag("--ignore-eos", gen_ignore_eos, "Keep generating past EOS (fixed lengths for benchmarks)");
  StructuredOutputFlags gen_structured;
  add_structured_output_flags(*gen, gen_structured);
  int64_t gen_warmup = 0;
  gen->add_option("--warmup", gen_warmup,
                  "Untimed runs before the timed one, with the same flags on another prompt of the same length "
                  "that shares no prefix with it: llama-bench's warm-up (benchmarks; --json reports warmup_runs)")
      ->capture_default_str();

  CLI::App* logits = app.add_subcommand("logits", "Teacher-forced logits (n_tokens x vocab, f32) to a file");
  lio::add_model_flags(*logits, log_o);
  lio::add_device_flag(*logits, log_o);
  std::string ids_text, out_path;
  logits->add_option("--ids", ids_text, "Comma-separated token ids")->required();
  logits->add_option("--out", out_path, "Output file (raw little-endian f32)")->required();
  logits->add_option("--kv-cache-dtype", log_o.kv_cache_dtype,
                     "KV-cache elements: f32, f16 or int8 (chapter 03), to compare each setting's logits")
      ->capture_default_str();

  lio::CommonOptions ppl_o;
  CLI::App* ppl = app.add_subcommand("perplexity", "Perplexity over a text file, computed as llama-perplexity does");
  lio::add_model_flags(*ppl, ppl_o);
  lio::add_device_flag(*ppl, ppl_o);
  lio::add_kv_pool_flags(*ppl, ppl_o);
  std::string text_path;
  int64_t ppl_ctx = 512, ppl_chunks = -1;
  ppl->add_option("--text", text_path, "Text file to score")->required();
  ppl->add_option("--ctx-size,-c", ppl_ctx, "Tokens per chunk (llama-perplexity's -c); the second half is scored")
      ->capture_default_str();
  ppl->add_option("--chunks", ppl_chunks, "Chunks to evaluate (-1: all; llama-perplexity's --chunks)")
      ->capture_default_str();

  CLI::App* quant = app.add_subcommand("quantize", "Rewrite a GGUF's weight matrices at 8, 4 or 3 bits (RTN, GPTQ, AWQ or SmoothQuant; llama.cpp blocks)");
  std::string q_in, q_out, q_keep;
  lio::QuantizeOptions q_opts;
  bool q_json = false;
  quant->add_option("--model", q_in, "Input GGUF (any dtype LIO reads)")->required();
  quant->add_option("--out", q_out, "Output GGUF (a new file)")->required();
  quant->add_option("--method", q_opts.method,
                    "rtn, gptq (Frantar et al. 2023), awq (Lin et al. 2024) or smoothquant (Xiao et al. 2023; "
                    "for W8A8 with --activations int8-token)")
      ->capture_default_str();
  quant->add_option("--bits", q_opts.bits,
                    "8 (Q8_0), 4 (Q4_0, or Q4_1 with --asymmetric) or 3 (LIO's packed Q3_0 / Q3_1, which llama.cpp "
                    "cannot read; see --llama-blocks)")
      ->capture_default_str();
  quant->add_flag("--llama-blocks", q_opts.llama_blocks,
                  "3 bits: store the codes in llama.cpp's Q4_0 / Q4_1 blocks (llama.cpp runs the file; 4-bit memory)");
  quant->add_option("--group-size", q_opts.group_size,
                    "Weights per scale: 32 (llama.cpp's block), 64, 128, or channel (one scale per output row)")
      ->transform(CLI::Transformer(std::map<std::string, std::string>{{"channel", "0"}}))
      ->capture_default_str();
  quant->add_flag("--asymmetric", q_opts.asymmetric, "4 / 3 bits with a minimum per group (Q4_1 / Q3_1)");
  quant->add_option("--calib", q_opts.calib_path, "gptq / awq: a text file to calibrate on (real text, not the evaluation text)");
  quant->add_option("--calib-ctx", q_opts.calib_ctx, "Calibration tokens per chunk")->capture_default_str();
  quant->add_option("--calib-chunks", q_opts.calib_chunks, "Calibration chunks (-1: the whole text)")->capture_default_str();
  quant->add_option("--damp", q_opts.damp, "gptq: dampening, a fraction of mean(diag H)")->capture_default_str();
  quant->add_flag("--act-order,!--no-act-order", q_opts.act_order,
                  "gptq: quantize columns by decreasing H_cc (default; --no-act-order: in order)");
  quant->add_option("--awq-grid", q_opts.awq_grid, "awq: exponents tried in the scale search")->capture_default_str();
  quant->add_option("--smooth-alpha", q_opts.smooth_alpha, "smoothquant: migration strength alpha in [0, 1]")
      ->capture_default_str();
  quant->add_option("--keep", q_keep, "Tensors kept at higher precision: DTYPE:PREFIX,... (f32, f16, bf16, q8_0), e.g. f32:token_embd,output");
  quant->add_flag("--json", q_json, "Print one JSON summary");

  lio::CommonOptions batch_o;
  lio::BatchOptions batch_b;
  CLI::App* batch = lio::add_batch_subcommand(app, batch_o, batch_b);

  lio::CommonOptions spec_o;
  lio::SpecDataOptions spec_s;
  CLI::App* spec_data = lio::add_spec_data_subcommand(app, spec_o, spec_s);

  return lio::run_main(app, argc, argv, [&]() -> int {
    if (info->parsed()) return info_families ? cmd_families(info_o.json) : cmd_info(info_o);
    if (tokenize->parsed()) return cmd_tokenize(tok_o, no_special);
    if (chat_tmpl->parsed())
      return cmd_chat_template(ct_model, ct_template, ct_messages, !ct_no_generation_prompt, ct_bos, ct_eos, ct_json);
    if (gen->parsed()) return cmd_generate(gen_o, gen_ignore_eos, gen_warmup, gen_structured);
    if (logits->parsed()) return cmd_logits(log_o, ids_text, out_path);
    if (batch->parsed()) return lio::run_batch(batch_o, batch_b);
    if (spec_data->parsed()) return lio::run_spec_data(spec_o, spec_s);
    if (ppl->parsed()) return cmd_perplexity(ppl_o, text_path, ppl_ctx, ppl_chunks);
    if (quant->parsed()) return cmd_quantize(q_in, q_out, q_opts, q_keep, q_json);
    return 2;
  });
}
