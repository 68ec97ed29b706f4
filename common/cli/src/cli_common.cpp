#include "lio/cli_common.h"

#include "lio/omp_compat.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "lio/error.h"
#include "lio/kv_head_variants.h"

namespace lio {

void add_model_flags(CLI::App& app, CommonOptions& o) {
  app.add_option("--model", o.model,
                 "Model: a .gguf file or a Hugging Face directory (default: $LIO_MODEL, else "
                 "models/SmolLM2-135M-Instruct.Q4_1.gguf)");
  app.add_option("--dtype", o.dtype,
                 "Weights in memory: auto = as stored (quantized blocks dequantized on the fly), "
                 "f32 / f16 / bf16 = converted once at load")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU threads (0 = all cores)")->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON summary on stdout instead of streaming text");
}

void add_device_flag(CLI::App& app, CommonOptions& o) {
  app.add_option("--device", o.device,
                 "Where the forward pass runs: cpu, or cuda (GPU 0, or each MPI rank its host's next GPU; "
                 "weights and KV cache in device memory)")
      ->capture_default_str();
  app.add_option("--attention", o.attention,
                 "KV heads (chapter 02): gqa (as stored), mha (one per query head, K/V heads "
                 "repeated: same outputs), mqa (one, mean-pooled), or gqa:N")
      ->capture_default_str();
  app.add_flag("--fused-kernels", o.fused_kernels,
               "CUDA: a decode row's RMSNorm + Q/K/V projections, RMSNorm + gate/up + SwiGLU, and RoPE of Q "
               "and K each as one kernel, and Q4_1 GEMVs with 32-bit loads (issue 45). Off by default until a "
               "GPU check has compared them with the unfused kernels; no effect on the CPU");
  app.add_option("--attention-backend", o.attention_backend,
                 "Attention kernels (chapter 07): flash (tiled, online softmax, split-KV decode; "
                 "O(N) memory), naive (the score matrix materialized; O(N^2) memory) or paged "
                 "(chapter 04's kernel: one block per row and head, no split)")
      ->capture_default_str();
  app.add_option("--activations", o.activations,
                 "Matmul activations (quantized weights): f32 (exact: the weights as stored); int8 (x rounded "
                 "per 32-element block, integer dot products, as llama.cpp does: faster, at llama.cpp's own "
                 "accuracy); int8-token (W8A8: one scale per token, chapter 03); auto (int8 on the CPU, "
                 "f32 on a GPU: the default of lio generate, lio batch and lio-server, chosen by measurement)")
      ->capture_default_str();
  app.add_option("--tensor-parallel-size", o.parallel.tensor_parallel_size,
                 "Ranks each layer is split over (chapter 08; Megatron-LM column/row parallel, vLLM's flag); "
                 "run under scripts/mpirun.sh -n TP*PP")
      ->capture_default_str();
  app.add_option("--pipeline-parallel-size", o.parallel.pipeline_parallel_size,
                 "Pipeline stages the layers are split over (chapter 08)")
      ->capture_default_str();
  app.add_option("--all-reduce", o.all_reduce,
                 "All-reduce over MPI (chapter 08): library (MPI_Allreduce) or ring (chapter 08's Task 2)")
      ->capture_default_str();
}

void add_kv_pool_flags(CLI::App& app, CommonOptions& o, bool engine) {
  app.add_option("--block-size", o.kv_pool.block_size, "Tokens per KV-cache block (PagedAttention)")
      ->capture_default_str();
  app.add_option("--kv-cache-mib", o.kv_pool.kv_cache_mib,
                 "KV-cache pool size in MiB (0 = default: a quarter of RAM up to 1024 MiB on the CPU, "
                 "80% of free GPU memory on CUDA)")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "KV-cache elements: f32, f16, or int8 (one scale per token and KV head; chapter 03); "
                 "MLA models: f32 only")
      ->capture_default_str();
  if (!engine) return;
  app.add_flag("--enforce-eager,!--cuda-graphs", o.enforce_eager,
               "--enforce-eager (the default for now, vLLM's flag): every decode step launches its kernels one "
               "by one. --cuda-graphs: the engine captures the decode step once per batch-size bucket at "
               "start-up and replays it as one launch (--device cuda; nothing changes on the CPU). Graphs "
               "become the default once a GPU check has compared them with eager steps (issue 45)");
  o.kv_pool.hybrid = true;
  app.add_flag("--disable-hybrid-kv-cache-manager{false}", o.kv_pool.hybrid,
               "Keep every layer of a sliding-window model (Gemma 3) in every KV block: windowed layers then "
               "keep blocks that slid out of their window instead of giving them back (vLLM's flag)");
}

void add_generation_flags(CLI::App& app, CommonOptions& o, float default_temperature) {
  o.sampler.temperature = default_temperature;
  app.add_option("--prompt", o.prompt, "Prompt text (with --chat: the user message)")->required();
  app.add_flag("--chat", o.chat, "Apply the model's chat template (ChatML for SmolLM2)");
  app.add_option("--system", o.system, "System message for --chat (default: the template's own)");
  app.add_option("--max-tokens", o.max_tokens, "Generate at most this many tokens")->capture_default_str();
  app.add_option("--stop", o.stop, "Stop when this text appears (repeatable; not included in the output)");
  app.add_option("--temperature", o.sampler.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  app.add_option("--top-k", o.sampler.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  app.add_option("--top-p", o.sampler.top_p, "Nucleus sampling mass in (0, 1]; 1 = off")->capture_default_str();
  app.add_option("--min-p", o.sampler.min_p, "Drop tokens below min_p x p(max); 0 = off")->capture_default_str();
  app.add_option("--repeat-penalty", o.sampler.repeat_penalty, "Repetition penalty (CTRL); 1 = off")
      ->capture_default_str();
  app.add_option("--seed", o.sampler.seed, "RNG seed: same seed, same output")->capture_default_str();
}

void add_speculative_flags(CLI::App& app, CommonOptions& o) {
  app.add_option("--spec-method", o.spec_method,
                 "speculative decoding: none, draft (--draft-model), ngram (prompt lookup), early-exit (--draft-layers) "
                 "medusa (--medusa-heads) or eagle (--eagle-drafter)")
      ->capture_default_str();
  app.add_option("--draft-model", o.draft_model, "draft model (.gguf or HF dir) with the target's tokenizer");
  app.add_option("--num-speculative-tokens", o.speculative.num_speculative_tokens, "drafts per step, k in [1, 16] (Medusa, EAGLE: tree nodes, [1, 63])")
      ->capture_default_str();
  app.add_option("--draft-layers", o.speculative.draft_layers, "early exit: the target's first L layers draft")
      ->capture_default_str();
  app.add_option("--ngram-min", o.speculative.ngram_min, "n-gram lookup: shortest suffix matched")->capture_default_str();
  app.add_option("--ngram-max", o.speculative.ngram_max, "n-gram lookup: longest suffix matched")->capture_default_str();
  app.add_option("--medusa-heads", o.speculative.medusa_heads,
                 "Medusa: the heads file (scripts/make_medusa.sh writes models/<model>.medusa.safetensors)");
  app.add_option("--medusa-top-k", o.speculative.medusa_top_k,
                 "Medusa: candidates each head offers a tree node (1 = a chain); the tree has "
                 "--num-speculative-tokens nodes")
      ->capture_default_str();
  app.add_option("--eagle-drafter", o.speculative.eagle_drafter,
                 "EAGLE: the drafter file (scripts/make_eagle.sh writes models/<model>.eagle.safetensors)");
  app.add_option("--eagle-top-k", o.speculative.eagle_top_k,
                 "EAGLE: nodes expanded per tree level and children per node (1 = a chain); the tree keeps the "
                 "--num-speculative-tokens best nodes")
      ->capture_default_str();
  app.add_option("--eagle-depth", o.speculative.eagle_depth, "EAGLE: tree levels at most (top-k > 1)")
      ->capture_default_str();
  app.add_option("--spec-acceptance", o.spec_acceptance,
                 "how drafts are accepted: rejection (exact: the target's own distribution) or typical (Medusa's "
                 "typical acceptance, LOSSY when sampling; greedy output unchanged)")
      ->capture_default_str();
  app.add_option("--typical-posterior-threshold", o.speculative.typical_posterior_threshold,
                 "typical acceptance: epsilon in (0, 1]; a draft passes when p > min(epsilon, alpha * exp(-entropy))")
      ->capture_default_str();
  app.add_option("--typical-posterior-alpha", o.speculative.typical_posterior_alpha,
                 "typical acceptance: alpha (delta) >= 0")
      ->capture_default_str();
}

SpeculativeConfig speculative_from_options(const LoadedModel& m, const CommonOptions& o) {
  SpeculativeConfig c = o.speculative;
  c.method = parse_spec_method(o.spec_method);
  c.acceptance = parse_spec_acceptance(o.spec_acceptance);
  if (c.acceptance == SpecAcceptance::Typical && c.method == SpecMethod::None) {
    throw InvalidArgument("--spec-acceptance typical needs a --spec-method to accept drafts from");
  }
  if (c.method == SpecMethod::Draft && o.draft_model.empty()) {
    throw InvalidArgument("--spec-method draft needs --draft-model PATH");
  }
  if (c.method != SpecMethod::Draft && !o.draft_model.empty()) {
    throw InvalidArgument("--draft-model is used only with --spec-method draft (got --spec-method " + o.spec_method + ")");
  }
  c.validate(m.config.n_layers);
  return c;
}

DraftRunner draft_from_options(const LoadedModel& m, ModelRunner& target, const CommonOptions& o,
                               const SpeculativeConfig& config) {
  DraftRunner d;
  if (config.method != SpecMethod::Draft) return d;
  d.model = std::make_unique<LoadedModel>(load_model(o.draft_model, WeightMode::AsStored));
  check_draft_tokenizer(*m.tokenizer, *d.model->tokenizer);
  // As many blocks as the target's pool, of the same size and dtype: a draft sequence never
  // needs more positions than its target sequence. A hybrid target's blocks hold only a KV
  // cache group's lanes, so count the blocks its pool would have with one group instead (the
  // draft's own blocks hold all its layers); when a draft sequence finds no block, it simply
  // does not speculate that step (DraftModelProposer).
  // (n_layers() is the lanes of a block: the model's layer count with one group.)
  const KvPool& tp = target.kv_pool();
  const auto target_layers = static_cast<int64_t>(tp.groups().layer_lane.size());
  const int64_t n_blocks = std::max<int64_t>(1, tp.n_blocks() * tp.n_layers() / target_layers);
  d.runner = std::make_unique<ModelRunner>(
      make_backend(*d.model, parse_device(o.device), activations_from_options(o),
                   parse_attention_backend(o.attention_backend)),
      KvPoolConfig{tp.block_size(), n_blocks, tp.dtype()});
  return d;
}

void apply_threads(int threads) {
  if (threads < 0) throw InvalidArgument("--threads must be >= 0, got " + std::to_string(threads));
  if (threads > 0) omp_set_num_threads(threads);
}

LoadedModel load_from_options(const CommonOptions& o) {
  const std::string path = o.model.empty() ? default_model_path() : o.model;
  LoadedModel m = load_model(path, parse_weight_mode(o.dtype));
  apply_kv_head_variant(m, parse_attention_variant(o.attention, m.config));
  return m;
}

ActivationPrecision activations_from_options(const CommonOptions& o) {
  if (o.activations != "auto") return parse_activation_precision(o.activations);
  return parse_device(o.device) == Device::Cpu ? ActivationPrecision::Int8 : ActivationPrecision::F32;
}

std::unique_ptr<ModelRunner> runner_from_options(const LoadedModel& m, const CommonOptions& o,
                                                 const BackendWrapper& wrap) {
  KvPoolOptions pool = o.kv_pool;
  pool.dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  const Device device = parse_device(o.device);
  const ActivationPrecision activations = activations_from_options(o);
  const AttentionBackend attention = parse_attention_backend(o.attention_backend);
  check_kv_pool_options(pool);  // before the backend: a GPU backend uploads the weights
  const AllReduceAlgorithm algorithm = parse_all_reduce_algorithm(o.all_reduce);
  if (o.parallel.world_size() == 1 && world_size() == 1) {
    std::unique_ptr<Backend> backend = make_backend(m, device, activations, attention);
    backend->set_fused_kernels(o.fused_kernels);
    return make_runner(wrap ? wrap(std::move(backend)) : std::move(backend), pool);
  }
  // The workers serve one runner's commands: a second runner over the ranks (a draft model's,
  // say) would meet them in the wrong collective and hang.
  static bool grid_runner_made = false;
  if (grid_runner_made) {
    throw UnsupportedError("over several ranks a program runs one model (chapter 08); this one asked for a second "
                           "runner (a draft model?): run it without mpirun");
  }
  grid_runner_made = true;
  std::unique_ptr<ModelRunner> runner =
      make_parallel_runner(m, o.parallel, algorithm, device, pool, activations, attention, wrap);
  if (!runner->is_driver()) {  // a worker: serve the driver's steps; the caller then returns 0
    runner->serve_worker();
    return nullptr;
  }
  return runner;
}

nlohmann::ordered_json generate_result_json(const GenerateResult& r) {
  nlohmann::ordered_json j{{"text", r.text},
                                {"token_ids", r.token_ids},
                                {"n_prompt_tokens", r.n_prompt_tokens},
                                {"n_generated_tokens", r.token_ids.size()},
                                {"finish_reason", finish_reason_name(r.finish_reason)},
                                {"ttft_ms", r.ttft_ms},
                                {"tpot_ms", r.tpot_ms},
                                {"tokens_per_s", r.tokens_per_s},
                                {"total_ms", r.total_ms},
                                {"kv_bytes", r.kv_bytes},
                                {"kv_tokens", r.kv_tokens},
                                {"kv_bytes_allocated", r.kv_bytes_allocated}};
  if (r.n_grammar_masks > 0) {
    j["n_grammar_masks"] = r.n_grammar_masks;
    j["grammar_mask_ms"] = r.grammar_mask_ms;
  }
  if (r.spec_method != "none") {
    j["spec_method"] = r.spec_method;
    j.update(spec_decode_json(r.spec_num_drafts, r.spec_num_draft_tokens, r.spec_num_accepted_tokens));
  }
  return j;
}

nlohmann::ordered_json spec_decode_json(int64_t num_drafts, int64_t num_draft_tokens, int64_t num_accepted_tokens) {
  const auto ratio = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  return nlohmann::ordered_json{{"spec_num_drafts", num_drafts},
                                {"spec_num_draft_tokens", num_draft_tokens},
                                {"spec_num_accepted_tokens", num_accepted_tokens},
                                {"acceptance_rate", ratio(num_accepted_tokens, num_draft_tokens)},
                                {"mean_accepted_tokens", ratio(num_accepted_tokens, num_drafts)}};
}

std::vector<int32_t> prompt_tokens(const LoadedModel& m, const CommonOptions& o) {
  if (o.prompt.empty()) throw InvalidArgument("--prompt is empty");
  const Tokenizer& tok = *m.tokenizer;
  if (o.chat) {
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    return tok.encode(tok.apply_chat_template(messages, true), /*parse_special=*/true,
                      tok.add_bos_default());
  }
  return tok.encode(o.prompt, /*parse_special=*/true, tok.add_bos_default());
}

int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Chapter 08: under mpirun every rank runs this program; an error on one ends them all.
  const auto fail = [&](const char* kind, const char* what, int code) {
    std::fflush(stdout);
    const std::string rank = world_size() > 1 ? "[rank " + std::to_string(world_rank()) + "] " : "";
    std::cerr << rank << app.get_name() << ": " << kind << what << "\n";
    std::cerr.flush();
    abort_world(code);
    return code;
  };
  try {
    init_parallel(&argc, &argv);
    const int code = body();
    finalize_parallel();
    return code;
  } catch (const Error& e) {
    return fail("error: ", e.what(), 1);
  } catch (const std::exception& e) {
    return fail("internal error: ", e.what(), 3);
  }
}

std::string describe_graph_capture(const GraphCapture& capture, const CommonOptions& o) {
  if (o.device != "cuda") return "";
  if (o.enforce_eager) return "off (--enforce-eager; --cuda-graphs turns them on): every decode step launches its kernels one by one";
  if (capture.sizes.empty()) {
    return "none (" + (capture.error.empty() ? std::string("this model or attention kernel runs eagerly") : capture.error) +
           ")";
  }
  char text[160];
  std::snprintf(text, sizeof text, "%zu decode buckets (%lld .. %lld sequences) captured in %.0f ms", capture.sizes.size(),
                static_cast<long long>(capture.sizes.front()), static_cast<long long>(capture.sizes.back()),
                capture.seconds * 1e3);
  std::string out = text;
  if (capture.device_bytes >= 0) {
    std::snprintf(text, sizeof text, ", %.1f MiB of device memory", capture.device_bytes / 1048576.0);
    out += text;
    if (capture.budget_bytes >= 0) {
      std::snprintf(text, sizeof text, " of a %.0f MiB budget", capture.budget_bytes / 1048576.0);
      out += text;
    }
  }
  if (!capture.error.empty()) out += "; stopped at " + capture.error + " (larger batches run eagerly)";
  return out;
}

}  // namespace lio
