#include "lio/speculative.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "lio/error.h"
#include "lio/eagle.h"
#include "lio/medusa.h"
#include "lio/spec_decode.h"

namespace lio {

const char* spec_method_name(SpecMethod method) {
  switch (method) {
    case SpecMethod::Draft: return "draft";
    case SpecMethod::Ngram: return "ngram";
    case SpecMethod::EarlyExit: return "early-exit";
    case SpecMethod::Medusa: return "medusa";
    case SpecMethod::Eagle: return "eagle";
    case SpecMethod::None: break;
  }
  return "none";
}

void SpeculativeConfig::validate(int64_t target_layers) const {
  if (method == SpecMethod::None) return;
  const bool tree = method == SpecMethod::Medusa || method == SpecMethod::Eagle;
  const int64_t k_max = tree ? 63 : 16;  // a tree: 64 rows with its root
  if (num_speculative_tokens < 1 || num_speculative_tokens > k_max) {
    throw InvalidArgument("--num-speculative-tokens must be in [1, " + std::to_string(k_max) + "], got " +
                          std::to_string(num_speculative_tokens));
  }
  if (method == SpecMethod::Medusa && medusa_heads.empty()) {
    throw InvalidArgument("--spec-method medusa needs --medusa-heads FILE (scripts/make_medusa.sh makes one)");
  }
  if (method == SpecMethod::Medusa && medusa_top_k < 1) {
    throw InvalidArgument("--medusa-top-k must be >= 1, got " + std::to_string(medusa_top_k));
  }
  if (method == SpecMethod::Eagle && eagle_drafter.empty()) {
    throw InvalidArgument("--spec-method eagle needs --eagle-drafter FILE (scripts/make_eagle.sh makes one)");
  }
  if (method == SpecMethod::Eagle && (eagle_top_k < 1 || eagle_depth < 1)) {
    throw InvalidArgument("--eagle-top-k and --eagle-depth must be >= 1, got " + std::to_string(eagle_top_k) + " and " +
                          std::to_string(eagle_depth));
  }
  if (acceptance == SpecAcceptance::Typical &&
      (!(typical_posterior_threshold > 0.0 && typical_posterior_threshold <= 1.0) ||
       !(typical_posterior_alpha >= 0.0 && std::isfinite(typical_posterior_alpha)))) {
    throw InvalidArgument("--typical-posterior-threshold must be in (0, 1] and --typical-posterior-alpha finite and "
                          ">= 0, got " + std::to_string(typical_posterior_threshold) + " and " +
                          std::to_string(typical_posterior_alpha));
  }
  if (method == SpecMethod::EarlyExit && (draft_layers < 1 || draft_layers >= target_layers)) {
    throw InvalidArgument("--draft-layers must be in [1, " + std::to_string(target_layers) + ") for a " +
                          std::to_string(target_layers) + "-layer target, got " + std::to_string(draft_layers));
  }
  if (method == SpecMethod::Ngram && (ngram_min < 1 || ngram_max < ngram_min)) {
    throw InvalidArgument("--ngram-min must be >= 1 and --ngram-max >= --ngram-min, got " + std::to_string(ngram_min) +
                          " and " + std::to_string(ngram_max));
  }
}

void check_draft_tokenizer(const Tokenizer& target, const Tokenizer& draft) {
  const std::string what = "the draft model's tokenizer differs from the target's: ";
  if (draft.vocab_size() != target.vocab_size()) {
    throw InvalidArgument(what + "vocabulary of " + std::to_string(draft.vocab_size()) + " tokens, the target's has " +
                          std::to_string(target.vocab_size()) + " (speculation compares token ids)");
  }
  for (int64_t id = 0; id < target.vocab_size(); ++id) {
    const auto t = static_cast<int32_t>(id);
    if (draft.token_text(t) != target.token_text(t)) {
      throw InvalidArgument(what + "token " + std::to_string(id) + " is '" + draft.token_text(t) + "' in the draft, '" +
                            target.token_text(t) + "' in the target (speculation compares token ids)");
    }
  }
  if (draft.eos_id() != target.eos_id()) {
    throw InvalidArgument(what + "EOS is token " + std::to_string(draft.eos_id()) + ", the target's " +
                          std::to_string(target.eos_id()));
  }
}

// ---- n-gram lookup ------------------------------------------------------------------------

NgramProposer::NgramProposer(int64_t n_min, int64_t n_max) : n_min_(n_min), n_max_(n_max) {
  SpeculativeConfig{.method = SpecMethod::Ngram, .ngram_min = n_min, .ngram_max = n_max}.validate(1);
}

std::vector<DraftProposal> NgramProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) {
  std::vector<DraftProposal> out(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (ks[i] < 1) continue;
    out[i].tokens = ngram_propose(seqs[i]->token_ids(), n_min_, n_max_, ks[i]);  // Task 3
  }
  return out;
}

// ---- a draft model (separate, or the target's first L layers) -------------------------------

DraftModelProposer::DraftModelProposer(ModelRunner& draft)
    : runner_(draft),
      blocks_(std::make_unique<BlockManager>(draft.kv_pool().n_blocks(), draft.kv_pool().block_size())) {}

DraftModelProposer::DraftModelProposer(ModelRunner& target, int64_t n_layers) : runner_(target), n_layers_(n_layers) {
  SpeculativeConfig{.method = SpecMethod::EarlyExit, .draft_layers = n_layers}.validate(target.config().n_layers);
}

DraftModelProposer::State& DraftModelProposer::state_of(const Sequence& seq) {
  State& st = states_[seq.id()];
  if (!st.sampler) {
    SamplerConfig sc = seq.params().sampler;
    sc.seed ^= 0x9E3779B97F4A7C15ULL;  // the draft's own stream: the target's stays as without speculation
    sc.logprobs = -1;
    st.sampler = std::make_unique<Sampler>(sc);
  }
  return st;
}

std::vector<DraftProposal> DraftModelProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) {
  const int64_t vocab = runner_.config().vocab_size;
  std::vector<DraftProposal> out(seqs.size());
  // Who drafts, from which position, through which blocks.
  struct Job {
    size_t index;
    Sequence* seq;
    State* state;
    int64_t k;
    int64_t from;  // first position this step's first draft pass runs
  };
  std::vector<Job> jobs;
  int64_t max_k = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    const int64_t n = seq.n_tokens();
    // Draft positions up to n - 1 + k - 1 must lie inside the draft's context.
    const int64_t k = std::min(ks[i], runner_.config().context_length - n + 1);
    if (k < 1) continue;
    State& st = state_of(seq);
    int64_t from = n - 1;  // early exit: the target's K/V of positions < n - 1 are its own first L layers'
    if (blocks_) {
      // The draft's pool: positions from its own num_computed up to n - 1 + k - 1. If it cannot
      // hold them this sequence simply does not speculate this step.
      from = std::min(st.num_computed, n - 1);
      if (!blocks_->allocate(st.block_table, n + k - 1)) continue;
    }
    jobs.push_back({i, &seq, &st, k, from});
    max_k = std::max(max_k, k);
  }
  // One batched pass per draft position: pass j feeds the tokens the draft has not seen (the
  // catch-up and the last token at j = 0, draft j otherwise) and draws draft j + 1.
  std::vector<int32_t> history;
  std::vector<int32_t> generated;
  std::vector<float> row(static_cast<size_t>(vocab));
  std::vector<float> q(static_cast<size_t>(vocab));
  for (int64_t j = 0; j < max_k; ++j) {
    ForwardBatch batch(runner_.kv_pool().block_size());
    batch.n_layers = n_layers_;
    std::vector<const Job*> in_pass;
    for (const Job& job : jobs) {
      if (job.k <= j) continue;
      const Sequence& seq = *job.seq;
      const std::vector<int32_t>& drafts = out[job.index].tokens;
      // The draft model's own pool (one table), or early exit's: the target's, every group's table.
      const std::span<const std::vector<int32_t>> tables =
          blocks_ ? std::span<const std::vector<int32_t>>(&job.state->block_table, 1)
                  : std::span<const std::vector<int32_t>>(seq.block_tables);
      if (j == 0) {
        const std::span<const int32_t> ids(seq.token_ids());
        batch.add_sequence(ids.subspan(static_cast<size_t>(job.from)), job.from, tables, 1, true);
      } else {
        batch.add_sequence(std::span<const int32_t>(&drafts[static_cast<size_t>(j - 1)], 1), seq.n_tokens() - 1 + j,
                           tables, 1, true);
      }
      in_pass.push_back(&job);
    }
    const std::span<const float> logits = runner_.forward(batch);
    for (size_t r = 0; r < in_pass.size(); ++r) {
      const Job& job = *in_pass[r];
      Sequence& seq = *job.seq;
      DraftProposal& prop = out[job.index];
      history.assign(seq.token_ids().begin(), seq.token_ids().end());
      history.insert(history.end(), prop.tokens.begin(), prop.tokens.end());
      generated.assign(seq.output_ids().begin(), seq.output_ids().end());
      generated.insert(generated.end(), prop.tokens.begin(), prop.tokens.end());
      std::copy_n(logits.begin() + static_cast<std::ptrdiff_t>(r) * vocab, vocab, row.begin());
      Sampler& sampler = *job.state->sampler;
      sampler.probabilities(row, history, generated, q);
      const int32_t token = sample_from_probs(q, sampler.uniform());
      prop.tokens.push_back(token);
      if (sampler.config().temperature != 0.0f) prop.probs.insert(prop.probs.end(), q.begin(), q.end());
    }
  }
  for (const Job& job : jobs) {
    // Draft K/V now cover positions up to n - 1 + k - 1 (the last draft is drawn, never fed).
    if (blocks_) job.state->num_computed = job.seq->n_tokens() - 1 + job.k;
  }
  return out;
}

void DraftModelProposer::on_verified(const Sequence& seq) {
  if (!blocks_) return;
  const auto it = states_.find(seq.id());
  if (it == states_.end()) return;
  // The sequence agrees with what the draft computed up to its own verified length: the
  // accepted drafts are the draft's own, the first rejected one (and later) are not.
  State& st = it->second;
  st.num_computed = std::min(st.num_computed, seq.num_computed_tokens);
  blocks_->truncate(st.block_table, st.num_computed);
}

void DraftModelProposer::release(const Sequence& seq) {
  const auto it = states_.find(seq.id());
  if (it == states_.end()) return;
  if (blocks_) blocks_->free(it->second.block_table);
  states_.erase(it);
}

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, ModelRunner& target, ModelRunner* draft) {
  config.validate(target.config().n_layers);
  switch (config.method) {
    case SpecMethod::None: return nullptr;
    case SpecMethod::Ngram: return std::make_unique<NgramProposer>(config.ngram_min, config.ngram_max);
    case SpecMethod::EarlyExit: return std::make_unique<DraftModelProposer>(target, config.draft_layers);
    case SpecMethod::Medusa:
      if (target.parallel() != nullptr && target.parallel()->plan.pp_size > 1) {  // before any step: return_hidden
        throw UnsupportedError("--spec-method medusa reads the last stage's hidden states, which pipeline parallelism "
                               "keeps off the driver (run it with --pipeline-parallel-size 1)");
      }
      return std::make_unique<MedusaProposer>(
          MedusaHeads::load(config.medusa_heads, target.config().d_model, target.config().vocab_size),
          config.medusa_top_k);
    case SpecMethod::Eagle:
      if (target.parallel() != nullptr && target.parallel()->world->size() > 1) {  // before any step: embed_rows
        throw UnsupportedError("--spec-method eagle runs on one process: the drafter reads the token embedding, which "
                               "is split over the " + std::to_string(target.parallel()->world->size()) + " ranks");
      }
      return std::make_unique<EagleProposer>(
          EagleDrafter::load(config.eagle_drafter, target.config().d_model, target.config().vocab_size),
          [&target](std::span<const int32_t> ids, float* out) { target.embed_rows(ids, out); }, config.eagle_top_k,
          config.eagle_depth);
    case SpecMethod::Draft:
      if (draft == nullptr) throw InvalidArgument("--spec-method draft needs --draft-model PATH");
      if (draft->config().vocab_size != target.config().vocab_size) {
        throw InvalidArgument("the draft model's vocabulary has " + std::to_string(draft->config().vocab_size) +
                              " tokens, the target's " + std::to_string(target.config().vocab_size) +
                              " (speculation compares token ids)");
      }
      if (draft->kv_pool().block_size() != target.kv_pool().block_size()) {
        throw InvalidArgument("the draft's KV blocks hold " + std::to_string(draft->kv_pool().block_size()) +
                              " tokens, the target's " + std::to_string(target.kv_pool().block_size()));
      }
      return std::make_unique<DraftModelProposer>(*draft);
  }
  return nullptr;
}

}  // namespace lio
