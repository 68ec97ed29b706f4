// cli_common.h — the flags every LIO program shares, spelled the same everywhere, and
// the error boundary of `main`.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lio/cli_parse.h"
#include "lio/generate.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/speculative.h"

namespace lio {

/// Values of the shared flags (see add_model_flags / add_generation_flags for meanings).
struct CommonOptions {
  std::string model;            ///< --model: .gguf file or HF directory ($LIO_MODEL or models/...)
  std::string prompt;           ///< --prompt: text to continue (or the user message with --chat)
  bool chat = false;            ///< --chat: wrap the prompt in the model's chat template
  std::string system;           ///< --system: system message for --chat (default: the template's)
  int64_t max_tokens = 128;     ///< --max-tokens
  std::vector<std::string> stop;  ///< --stop (repeatable)
  SamplerConfig sampler;        ///< --temperature --top-k --top-p --min-p --repeat-penalty --seed
  std::string dtype = "auto";   ///< --dtype auto|f32|f16|bf16
  std::string device = "cpu";   ///< --device cpu|cuda
  /// --activations auto|f32|int8|int8-token (matmuls on quantized weights). The chapter programs
  /// default to f32 (exact arithmetic to teach on); lio generate, lio batch and lio-server to
  /// auto (activations_from_options).
  std::string activations = "f32";
  std::string attention = "gqa";  ///< --attention mha|gqa|mqa|gqa:N (KV heads, chapter 02)
  std::string attention_backend = "flash";  ///< --attention-backend flash|naive|paged (kernels, chapter 07)
  int threads = 0;              ///< --threads (0 = all cores)
  ParallelConfig parallel;      ///< --tensor-parallel-size, --pipeline-parallel-size (chapter 08)
  std::string all_reduce = "library";  ///< --all-reduce library|ring (chapter 08)
  KvPoolOptions kv_pool;        ///< --block-size, --kv-cache-mib (its dtype: from kv_cache_dtype)
  std::string kv_cache_dtype = "f32";  ///< --kv-cache-dtype f32|f16|int8, parsed by runner_from_options
  bool json = false;            ///< --json: one machine-readable summary on stdout
  bool fused_kernels = false;   ///< --fused-kernels: issue 45's fused decode kernels (CUDA; Backend::set_fused_kernels)
  bool enforce_eager = true;    ///< --enforce-eager (default) / --cuda-graphs (engine commands; EngineConfig)
  std::string spec_method = "none";  ///< --spec-method none|draft|ngram|early-exit (chapter 06)
  std::string spec_acceptance = "rejection";  ///< --spec-acceptance rejection|typical (chapter 06)
  std::string draft_model;      ///< --draft-model: the draft's .gguf file or HF directory
  SpeculativeConfig speculative;  ///< --num-speculative-tokens --draft-layers --ngram-min/max
};

/// One line on the decode CUDA graphs an Engine captured (issue 45), e.g. "9 decode buckets
/// (1 .. 64 sequences) captured in 85 ms, 2.1 MiB of device memory"; "off (--enforce-eager; ...)";
/// empty on the CPU, where there are none to speak of.
std::string describe_graph_capture(const GraphCapture& capture, const CommonOptions& o);

/// A draft model and its runner (chapter 06's `--spec-method draft`), or nothing.
struct DraftRunner {
  std::unique_ptr<LoadedModel> model;   ///< the draft's weights and tokenizer
  std::unique_ptr<ModelRunner> runner;  ///< on the target's device, its own KV pool
};

/// --model, --dtype, --threads, --json.
void add_model_flags(CLI::App& app, CommonOptions& o);
/// --device cpu|cuda, --activations, --attention, --attention-backend, and chapter 08's
/// --tensor-parallel-size, --pipeline-parallel-size and --all-reduce (programs that run the
/// forward pass).
void add_device_flag(CLI::App& app, CommonOptions& o);
/// --block-size, --kv-cache-mib and --kv-cache-dtype (the paged KV pool). `engine`: the program
/// serves through the Engine, so a sliding-window model gets the hybrid KV cache (KV cache
/// groups, lio/kv_cache_coordinator.h) and the flag --disable-hybrid-kv-cache-manager.
void add_kv_pool_flags(CLI::App& app, CommonOptions& o, bool engine = false);
/// --prompt, --chat, --system, --max-tokens, --stop and the sampler flags.
void add_generation_flags(CLI::App& app, CommonOptions& o, float default_temperature);

/// --spec-method, --draft-model, --num-speculative-tokens, --draft-layers, --ngram-min and
/// --ngram-max (chapter 06; vLLM's names where it has flags).
void add_speculative_flags(CLI::App& app, CommonOptions& o);

/// The speculation settings the flags ask for, checked against the target `m` (layers), and,
/// for --spec-method draft, the draft model loaded as stored with a runner on the same device
/// whose KV pool has as many blocks as `target`'s (so the draft never runs out first). Throws
/// InvalidArgument for a bad method, k outside [1, 16], L outside [1, n_layers), bad n-gram
/// bounds, a draft without --draft-model or a --draft-model without --spec-method draft, a draft
/// whose tokenizer differs from the target's (check_draft_tokenizer); FormatError /
/// UnsupportedError when the draft file does not load; nothing is left running.
SpeculativeConfig speculative_from_options(const LoadedModel& m, const CommonOptions& o);
/// The draft runner for `config` (empty unless SpecMethod::Draft); see speculative_from_options.
DraftRunner draft_from_options(const LoadedModel& m, ModelRunner& target, const CommonOptions& o,
                               const SpeculativeConfig& config);

/// Applies --threads to OpenMP (0 = leave the default: all cores). Throws InvalidArgument if < 0.
void apply_threads(int threads);

/// Loads the model named by --model (default_model_path() when empty) in --dtype mode, with
/// the KV heads --attention asks for (apply_kv_head_variant). Throws as load_model, and
/// InvalidArgument for a bad --attention.
LoadedModel load_from_options(const CommonOptions& o);

/// The matmul activations `o` asks for. "auto" (the default of lio generate, lio batch and
/// lio-server) is Int8 on the CPU, chosen by measurement (issue 44's rule: the fastest setting
/// whose accuracy is at least llama.cpp's on the same file): per-32-block int8 activations
/// decode about 1.4x faster than f32 at batch 1 and their mean KL from the F32 model ties
/// llama.cpp's own (bench/results/cpu_activations_kl.md, cpu_decode.md). On a GPU "auto" is F32:
/// not yet measured there. Throws InvalidArgument for an unknown value or device.
ActivationPrecision activations_from_options(const CommonOptions& o);

/// Takes the backend --device names and returns the one the runner gets (itself, or wrapped).
using BackendWrapper = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;

/// The runner --device names, over `m` (which must outlive it), with the KV pool o.kv_pool
/// describes in o.kv_cache_dtype's elements. A non-empty `wrap` gets the backend before the
/// pool is made on it: how a chapter runs its own operator inside the one forward pass
/// (ch01_kv_cache: attention over its contiguous cache with chapter 01's decode_attention).
/// Over several ranks (chapter 08: --tensor-parallel-size x --pipeline-parallel-size under
/// mpirun) each rank builds its shard's runner (make_parallel_runner); on every rank but the
/// driver (world rank 0) this call serves the driver's steps (ModelRunner::serve_worker) until
/// the driver's runner is gone, then returns nullptr: the caller's body then returns 0 at once
/// (`if (!runner) return 0;`), and run_main finalizes MPI. Only the driver gets a runner.
/// Throws InvalidArgument for an unknown device, KV dtype or a bad pool size, UnsupportedError
/// when CUDA is asked for and unavailable, or for an f16 / int8 KV cache on CUDA or with an MLA
/// model (see make_runner), and what `wrap` throws.
std::unique_ptr<ModelRunner> runner_from_options(const LoadedModel& m, const CommonOptions& o,
                                                 const BackendWrapper& wrap = {});

/// The JSON summary of one generate() call, as the programs print it with --json: text,
/// token_ids, n_prompt_tokens, n_generated_tokens, finish_reason, ttft_ms, tpot_ms,
/// tokens_per_s, total_ms, kv_bytes, kv_tokens, kv_bytes_allocated; with speculation also
/// spec_num_drafts, spec_num_draft_tokens, spec_num_accepted_tokens, acceptance_rate (accepted /
/// drafted) and mean_accepted_tokens (accepted per verification round).
nlohmann::ordered_json generate_result_json(const GenerateResult& r);

/// Speculative decoding's counters as the programs print them with --json (chapter 06):
/// spec_num_drafts, spec_num_draft_tokens, spec_num_accepted_tokens, acceptance_rate (accepted /
/// drafted, 0 when nothing was drafted) and mean_accepted_tokens (accepted per verification
/// round; tokens per target pass = 1 + this).
nlohmann::ordered_json spec_decode_json(int64_t num_drafts, int64_t num_draft_tokens, int64_t num_accepted_tokens);

/// Tokenizes the prompt: plain text, or with --chat the chat template applied
/// (+ generation prompt) and special tokens parsed. Throws InvalidArgument if empty.
std::vector<int32_t> prompt_tokens(const LoadedModel& m, const CommonOptions& o);

/// Runs `body` and turns every exception into one line on stderr and a non-zero exit:
/// CLI11 parse errors -> CLI11's exit code (usage), lio::Error -> 1, anything else -> 3.
/// Under mpirun (chapter 08) it initializes MPI first; an error on any rank is printed with the
/// rank ("[rank 2] ...") and ends every rank of the job (abort_world), so none is left waiting.
int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace lio
