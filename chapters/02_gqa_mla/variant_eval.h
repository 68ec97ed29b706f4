// variant_eval.h — what chapter 02 measures on each attention variant of the course model:
// quality against the unmodified model over a fixed text, and decode speed at a given
// context length and batch. Shared by ch02_gqa_mla and bench_gqa.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lio/model_loader.h"
#include "lio/model_runner.h"

namespace lio::ch02 {

/// The reference: log-softmax of the unmodified model at every position of `tokens`.
struct ReferenceLogprobs {
  std::vector<int32_t> tokens;  ///< the evaluated text, (n) token ids
  int64_t vocab = 0;            ///< vocabulary size
  std::vector<float> logprobs;  ///< (n, vocab) natural-log probabilities
};

/// Quality of a variant against the reference over the same tokens (natural logs).
struct Quality {
  double mean_kl = 0.0;         ///< mean over positions of KL(P_ref || P_variant), nats
  double top1_agreement = 0.0;  ///< fraction of positions whose argmax equals the reference's
  double perplexity = 0.0;      ///< exp(mean NLL of token i+1 given 0..i), i < n-1
  int64_t n_positions = 0;      ///< positions compared (n)
};

/// Runs `model` over `tokens` on the CPU in one pass (all logits) and returns its
/// log-softmax. Throws InvalidArgument if tokens is empty or longer than the context.
ReferenceLogprobs reference_logprobs(const LoadedModel& model, const std::vector<int32_t>& tokens);

/// How a variant runs (chapter 03's variants): the CPU matmuls' activations (W8A8) and the KV
/// cache's element type.
struct RunSettings {
  ActivationPrecision activations = ActivationPrecision::F32;  ///< --activations
  KvCacheDType kv = KvCacheDType::F32;               ///< --kv-cache-dtype
};

/// Runs `model` (a variant of the reference's model: same vocabulary) over ref.tokens on the
/// CPU under `run` and compares. Throws InvalidArgument if the vocabularies differ.
Quality evaluate_quality(const LoadedModel& model, const ReferenceLogprobs& ref, const RunSettings& run = {});

/// Decode speed of `model` on `device` at a context of `context` tokens for `batch`
/// sequences: each sequence's first `context` positions are in the KV pool (synthetic
/// contents, so no prefill is run: a decode step's time does not depend on the values it
/// reads), then `steps` decode steps of one token per sequence are timed one by one.
/// Returns batch / (median step seconds), tokens per second. Allocates a pool of
/// batch * ceil((context + steps) / 16) blocks. Throws InvalidArgument on a context past the
/// model's or counts < 1, std::bad_alloc (CPU) or CudaError (GPU) when the pool does not fit
/// in memory, UnsupportedError when `device` cannot run the model (or `run`'s KV type).
/// `run.activations`: the CPU backend's (ignored on a GPU).
double decode_tokens_per_s(const LoadedModel& model, int64_t context, int64_t batch, int steps,
                           Device device = Device::Cpu, const RunSettings& run = {});

/// What the decode-speed numbers ran on, for output headers: "cpu, <n> threads", or the GPU's
/// description (Backend::device_description, e.g. "cuda:0 (NVIDIA H100 ...)"). Throws
/// UnsupportedError when `device` cannot run `model`.
std::string describe_device(const LoadedModel& model, Device device);

/// The non-empty items of a comma-separated list ("mha,gqa,,mqa" -> mha, gqa, mqa): the
/// --variants style flags of chapters 02 and 03.
std::vector<std::string> split_commas(const std::string& text);

/// Tokens of the chapter's fixed English text (chapters/02_gqa_mla/eval_text.txt: public-domain
/// prose), cut to at most max_tokens. Throws InvalidArgument if the file is missing.
std::vector<int32_t> eval_text_tokens(const LoadedModel& model, int64_t max_tokens);

/// Tokens of the chapter's calibration text for the GQA -> MLA conversion
/// (chapters/02_gqa_mla/calib_text.txt: the Gettysburg Address and the opening of the US
/// Declaration of Independence, public domain; disjoint from the evaluation text), cut to at
/// most max_tokens. Throws InvalidArgument if the file is missing.
std::vector<int32_t> calibration_text_tokens(const LoadedModel& model, int64_t max_tokens);

}  // namespace lio::ch02
