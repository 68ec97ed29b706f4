#include "lio/speculative_decoder.h"

#include <algorithm>
#include <string>

#include "lio/error.h"
#include "lio/spec_round.h"
#include "lio/typical_acceptance.h"

namespace lio {
namespace {

/// A draft tree whose every node follows the one before it is a chain: its parents are dropped,
/// so the round verifies it as one (Task 5: no tree mask, no K/V moves).
void drop_chain_parents(std::vector<int32_t>& parents) {
  for (size_t j = 1; j < parents.size(); ++j)
    if (parents[j] != static_cast<int32_t>(j) - 1) return;
  parents.clear();
}

/// Structured outputs: a constrained sequence's drafts cut to what its grammar allows, before
/// verification (as vLLM's structured-output manager validates a request's draft tokens). A tree
/// keeps its first chain (node j whose parent is j - 1, from the root on; every row of a tree
/// would need the matcher at its own path), then the chain stops before the first token the
/// grammar refuses, so each verified row has one grammar state to mask it. The matcher ends where
/// it began. probs, when given: (k, vocab) draft distributions, cut with the drafts.
void constrain_drafts(Sequence& seq, std::vector<int32_t>& tokens, std::vector<int32_t>& parents,
                      std::vector<float>* probs, int64_t vocab) {
  GrammarMatcher* g = seq.grammar();
  if (g == nullptr || tokens.empty()) return;
  size_t chain = tokens.size();
  if (!parents.empty()) {
    chain = 0;
    while (chain < tokens.size() && parents[chain + 1] == static_cast<int32_t>(chain)) ++chain;
    parents.clear();
  }
  size_t n = 0;
  while (n < chain && g->accept_token(tokens[n])) ++n;
  g->rollback(static_cast<int64_t>(n));
  tokens.resize(n);
  if (probs != nullptr && !probs->empty()) probs->resize(n * static_cast<size_t>(vocab));
}

/// Chapter 06, Task 5's view of one speculating sequence (lio/spec_round.h): its tokens, its
/// own sampler, and its block tables in this engine's pool.
class EngineSpecRoundSequence final : public SpecRoundSequence {
 public:
  EngineSpecRoundSequence(Sequence& seq, KvCacheCoordinator& groups, int64_t vocab)
      : seq_(seq), groups_(groups), row_(static_cast<size_t>(vocab)) {}

  std::span<const int32_t> token_ids() const override { return seq_.token_ids(); }
  void target_probs(std::span<const float> logits, std::span<const int32_t> history, std::span<float> probs) override {
    const std::vector<int32_t>& own = seq_.token_ids();
    if (logits.size() != row_.size() || probs.size() != row_.size()) {
      throw InvalidArgument("target_probs: logits and probs must hold vocab = " + std::to_string(row_.size()) +
                            " floats, got " + std::to_string(logits.size()) + " and " + std::to_string(probs.size()));
    }
    if (history.size() < own.size() || !std::equal(own.begin(), own.end(), history.begin())) {
      throw InvalidArgument("target_probs: history must begin with the sequence's " + std::to_string(own.size()) +
                            " tokens (token_ids())");
    }
    // The sampler's penalties change the row in place: a copy, so the pass's logits stay as
    // they came. Its output history is what follows the prompt.
    std::copy(logits.begin(), logits.end(), row_.begin());
    if (!seq_.spec_token_masks.empty()) {
      // A constrained sequence's row after d drafts obeys the grammar's mask after them.
      const std::span<uint32_t> mask = seq_.sampler().token_mask(static_cast<int64_t>(row_.size()));
      const size_t d = history.size() - own.size();
      LIO_CHECK((d + 1) * mask.size() <= seq_.spec_token_masks.size(),
                "target_probs: a row past the sequence's drafts has no grammar mask");
      std::copy_n(seq_.spec_token_masks.begin() + static_cast<std::ptrdiff_t>(d * mask.size()), mask.size(),
                  mask.begin());
    }
    seq_.sampler().probabilities(row_, history, history.subspan(static_cast<size_t>(seq_.n_prompt_tokens())), probs);
  }
  double uniform() override { return seq_.sampler().uniform(); }
  int64_t num_computed_tokens() const override { return seq_.num_computed_tokens; }
  void set_num_computed_tokens(int64_t n) override { seq_.num_computed_tokens = n; }
  void truncate_blocks(int64_t n_tokens) override {
    groups_.truncate(seq_.block_tables, n_tokens);
  }

 private:
  Sequence& seq_;
  KvCacheCoordinator& groups_;
  std::vector<float> row_;  ///< (vocab) scratch: the row the sampler's penalties write into
};

}  // namespace

SpeculativeDecoder::SpeculativeDecoder(const SpeculativeConfig& config, ModelRunner& target, ModelRunner* draft,
                                       KvCacheCoordinator& groups)
    : config_(config), target_(target), groups_(groups), proposer_(make_proposer(config, target, draft)) {
  if (!proposer_) throw InvalidArgument("SpeculativeDecoder: --spec-method none drafts nothing (hold no decoder)");
}

void SpeculativeDecoder::plan_lookahead(const std::map<int64_t, std::unique_ptr<Sequence>>& live) {
  const int64_t k_max = config_.num_speculative_tokens;
  const int64_t context_length = target_.config().context_length;
  std::vector<Sequence*> seqs;
  std::vector<int64_t> ks;
  for (const auto& [id, seq] : live) {
    seq->num_lookahead_slots = 0;
    seq->spec_token_ids.clear();
    seq->spec_tree_parents.clear();
    if (seq->status != SequenceStatus::Running || seq->n_tokens() - seq->num_computed_tokens != 1) continue;
    if (seq->forks_pending > 0 || seq->params().sampler.logprobs >= 0) continue;
    const int64_t k = std::min({k_max, seq->params().max_tokens - seq->n_generated() - 1,
                                context_length - seq->n_tokens()});
    if (k < 1) continue;
    seqs.push_back(seq.get());
    ks.push_back(k);
  }
  if (!proposer_->drafts_before_schedule()) {
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->num_lookahead_slots = ks[i];
    return;
  }
  // n-gram lookup needs no forward pass: draft now, reserve exactly what was drafted.
  std::vector<DraftProposal> props = proposer_->propose(seqs, ks);
  for (size_t i = 0; i < seqs.size(); ++i) {
    constrain_drafts(*seqs[i], props[i].tokens, props[i].parents, nullptr, target_.config().vocab_size);
    seqs[i]->spec_token_ids = std::move(props[i].tokens);
    seqs[i]->spec_tree_parents = std::move(props[i].parents);
    drop_chain_parents(seqs[i]->spec_tree_parents);
    seqs[i]->num_lookahead_slots = static_cast<int64_t>(seqs[i]->spec_token_ids.size());
  }
}

void SpeculativeDecoder::draft(SchedulerOutput& sched, const std::map<int64_t, std::unique_ptr<Sequence>>& live) {
  draft_probs_.clear();
  std::vector<Sequence*> seqs;
  std::vector<int64_t> ks;
  std::vector<ScheduledSequence*> entries;
  for (ScheduledSequence& s : sched.scheduled) {
    Sequence& seq = *s.seq;
    const int64_t extra = s.n_new_tokens - (seq.n_tokens() - seq.num_computed_tokens);
    if (extra <= 0) {
      seq.spec_token_ids.clear();
      seq.spec_tree_parents.clear();
      continue;
    }
    if (proposer_->drafts_before_schedule()) {
      // The budget may have cut some; a tree's first nodes are a tree (parents come first).
      seq.spec_token_ids.resize(static_cast<size_t>(extra));
      if (!seq.spec_tree_parents.empty()) seq.spec_tree_parents.resize(static_cast<size_t>(extra + 1));
      drop_chain_parents(seq.spec_tree_parents);
      continue;
    }
    seqs.push_back(&seq);
    ks.push_back(extra);
    entries.push_back(&s);
  }
  if (!seqs.empty()) {
    std::vector<DraftProposal> props = proposer_->propose(seqs, ks);
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& seq = *seqs[i];
      constrain_drafts(seq, props[i].tokens, props[i].parents, &props[i].probs, target_.config().vocab_size);
      seq.spec_token_ids = std::move(props[i].tokens);
      if (!props[i].probs.empty()) draft_probs_[seq.id()] = std::move(props[i].probs);
      // A drafter may return fewer than asked (its pool full): the row count follows. The
      // slots reserved for the rest are given back with the rejected ones after the pass.
      entries[i]->n_new_tokens = 1 + static_cast<int64_t>(seq.spec_token_ids.size());
    }
  }
  sched.n_tokens = 0;
  for (const ScheduledSequence& s : sched.scheduled) sched.n_tokens += s.n_new_tokens;
  sched.n_tokens += static_cast<int64_t>(sched.padding.size());
  for (const auto& [id, seq] : live) seq->num_lookahead_slots = 0;
}

void SpeculativeDecoder::on_preempted(Sequence& seq) {
  proposer_->release(seq);  // its drafts are void; the draft's K/V go too
  seq.spec_token_ids.clear();
  seq.spec_tree_parents.clear();
  seq.spec_token_masks.clear();
}

void SpeculativeDecoder::release(const Sequence& seq) {
  proposer_->release(seq);
  draft_probs_.erase(seq.id());
}

std::vector<SpecVerifyResult> SpeculativeDecoder::run(const StepBatch& step) {
  const bool hidden = proposer_->wants_hidden();
  if (!step.speculative && !hidden) {  // no drafts this step: sample on the device where it can
    std::vector<SpecVerifyResult> results;
    for (const int32_t t : target_.forward_sample(step.batch, step.rows)) results.push_back({{t}, 0});
    return results;
  }
  const bool trees = std::any_of(step.sampling.begin(), step.sampling.end(), [](const Sequence* s) {
    return !s->spec_tree_parents.empty() && !s->spec_token_ids.empty();
  });
  std::span<const float> logits;
  if (!trees && !hidden) {
    logits = target_.forward(step.batch);
  } else {  // the step's batch as built, plus the trees' masks and positions and the hidden rows
    ForwardBatch batch = step.batch;
    batch.return_hidden = hidden;
    if (trees) mark_trees(step, batch);
    logits = target_.forward(batch);
  }
  return verify(step, logits, hidden ? target_.hidden_states() : std::span<const float>());
}

void SpeculativeDecoder::mark_trees(const StepBatch& step, ForwardBatch& batch) const {
  // A sequence's rows are its last token and its drafts, every row a logits row: its last
  // logits row names the batch row that ends it, and the sequence whose rows hold it.
  int64_t r = 0;
  for (const Sequence* seq : step.sampling) {
    const auto n_rows = 1 + static_cast<int64_t>(seq->spec_token_ids.size());
    r += n_rows;
    if (n_rows == 1 || seq->spec_tree_parents.empty()) continue;
    const int32_t last = batch.logits_rows[static_cast<size_t>(r - 1)];
    const auto s = std::upper_bound(batch.query_start_loc.begin(), batch.query_start_loc.end(), last) -
                   batch.query_start_loc.begin() - 1;
    batch.set_tree(s, tree_attention_masks(seq->spec_tree_parents));  // Task 6a
  }
}

std::vector<SpecVerifyResult> SpeculativeDecoder::verify(const StepBatch& step, std::span<const float> logits,
                                                         std::span<const float> hidden) {
  const int64_t vocab = target_.config().vocab_size;
  const int64_t d = target_.config().d_model;
  std::vector<SpecVerifyResult> results;
  std::vector<float> row(static_cast<size_t>(vocab)), path_hidden;
  int64_t r = 0;
  for (Sequence* seq : step.sampling) {
    const auto n_rows = 1 + static_cast<int64_t>(seq->spec_token_ids.size());
    const std::span<const float> rows = logits.subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(n_rows * vocab));
    std::vector<int64_t> kept{0};  // the rows whose logits gave the new tokens, in order
    if (n_rows == 1) {
      std::copy(rows.begin(), rows.end(), row.begin());
      results.push_back({{seq->sampler().sample(row, seq->token_ids(), seq->output_ids())}, 0});
    } else if (!seq->spec_tree_parents.empty() || config_.acceptance == SpecAcceptance::Typical) {
      // A tree; or typical acceptance, whose rule is the tree's for a chain too (the chain ran
      // with the causal mask, which is its tree mask, and its accepted path needs no K/V move).
      results.push_back(tree_round(*seq, rows, kept));
    } else {
      // Chapter 06, Task 5: p_0 .. p_k from the pass's rows, Task 4's acceptance, and the
      // rollback of the sequence's KV cache to what stays valid.
      SpecRoundPass pass;
      pass.logits = rows;
      pass.drafts = seq->spec_token_ids;
      const auto q = draft_probs_.find(seq->id());
      if (q != draft_probs_.end()) pass.draft_probs = q->second;
      pass.vocab = vocab;
      EngineSpecRoundSequence view(*seq, groups_, vocab);
      results.push_back(finish_speculative_round(pass, view));
      for (int64_t i = 1; i <= results.back().n_accepted; ++i) kept.push_back(i);
    }
    if (!hidden.empty()) {  // the verified path's hidden states, oldest first
      path_hidden.clear();
      for (const int64_t i : kept) {
        const auto row0 = hidden.begin() + static_cast<std::ptrdiff_t>((r + i) * d);
        path_hidden.insert(path_hidden.end(), row0, row0 + d);
      }
      proposer_->on_hidden(*seq, path_hidden);
    }
    r += n_rows;
  }
  return results;
}

SpecVerifyResult SpeculativeDecoder::tree_round(Sequence& seq, std::span<const float> rows, std::vector<int64_t>& kept) {
  // Task 6b over p_i, the target's sampling distribution at node i given the node's path (its
  // penalties see that path), then the accepted path's K/V moved to its positions' slots.
  std::vector<int32_t> chain;  // a chain's parents, when it is verified by the tree rules
  if (seq.spec_tree_parents.empty()) {
    chain.resize(seq.spec_token_ids.size() + 1);
    for (size_t j = 0; j < chain.size(); ++j) chain[j] = static_cast<int32_t>(j) - 1;
  }
  const std::vector<int32_t>& parents = chain.empty() ? seq.spec_tree_parents : chain;
  const auto n = static_cast<int64_t>(parents.size());
  const int64_t vocab = target_.config().vocab_size;
  std::vector<int32_t> tokens{seq.token_ids().back()};
  tokens.insert(tokens.end(), seq.spec_token_ids.begin(), seq.spec_token_ids.end());
  EngineSpecRoundSequence view(seq, groups_, vocab);
  std::vector<float> probs(static_cast<size_t>(n * vocab));
  std::vector<int32_t> history, path;
  for (int64_t i = 0; i < n; ++i) {
    path.clear();
    for (int64_t j = i; j > 0; j = parents[static_cast<size_t>(j)]) path.push_back(tokens[static_cast<size_t>(j)]);
    history.assign(seq.token_ids().begin(), seq.token_ids().end());
    history.insert(history.end(), path.rbegin(), path.rend());
    view.target_probs(rows.subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab)), history,
                      std::span<float>(probs).subspan(static_cast<size_t>(i * vocab), static_cast<size_t>(vocab)));
  }
  const TreeVerifyResult tv =
      config_.acceptance == SpecAcceptance::Typical
          ? verify_tree_typical(probs, parents, tokens, vocab, config_.typical_posterior_threshold,
                                config_.typical_posterior_alpha, [&] { return view.uniform(); })
          : verify_tree(probs, parents, tokens, vocab, [&] { return view.uniform(); });
  // Node path[d - 1] wrote its K/V at the tree's linear slot base + path[d - 1]; its position is
  // base + d. Ascending d never overwrites a slot a later copy reads (path[d - 1] >= d grows).
  const int64_t base = seq.num_computed_tokens;  // the root's position
  // The tree's slots in each KV cache group: chapter 04's Task 1 over its n linear positions.
  std::vector<std::vector<int32_t>> slots;
  for (const std::vector<int32_t>& table : seq.block_tables) {
    slots.emplace_back(static_cast<size_t>(n));
    compute_slot_mapping(table, base, target_.kv_pool().block_size(), slots.back());
  }
  std::vector<BlockCopy> copies;
  for (size_t dd = 1; dd <= tv.path.size(); ++dd) {
    const auto node = static_cast<size_t>(tv.path[dd - 1]);
    if (node == dd) continue;
    stats_.num_kv_slot_moves += 1;
    for (const std::vector<int32_t>& group : slots) copies.push_back({group[node], group[dd]});
  }
  target_.copy_slots(copies);
  const int64_t n_valid = base + 1 + static_cast<int64_t>(tv.path.size());
  seq.num_computed_tokens = n_valid;
  groups_.truncate(seq.block_tables, n_valid);
  kept.assign(1, 0);
  for (const int32_t node : tv.path) kept.push_back(node);
  return {tv.tokens, static_cast<int64_t>(tv.path.size())};
}

void SpeculativeDecoder::finish_round(Sequence& seq, const SpecVerifyResult& result, RequestOutput& out) {
  // verify() rolled the cache back to the verified length (Task 5). A stop inside the tokens
  // just appended keeps fewer of them than that: the cache never counts a position past the
  // sequence's last token. The drafter sees the verified length only.
  if (seq.num_computed_tokens > seq.n_tokens()) {
    seq.num_computed_tokens = seq.n_tokens();
    groups_.truncate(seq.block_tables, seq.num_computed_tokens);
  }
  const auto k = static_cast<int64_t>(seq.spec_token_ids.size());
  const int64_t n_accepted = result.n_accepted;
  seq.n_spec_drafts += 1;
  seq.n_spec_draft_tokens += k;
  seq.n_spec_accepted_tokens += n_accepted;
  seq.n_spec_rejections += n_accepted < k ? 1 : 0;
  stats_.num_drafts += 1;
  stats_.num_draft_tokens += k;
  stats_.num_accepted_tokens += n_accepted;
  if (static_cast<int64_t>(stats_.accepted_per_position.size()) < n_accepted)
    stats_.accepted_per_position.resize(static_cast<size_t>(n_accepted), 0);
  for (int64_t i = 0; i < n_accepted; ++i) stats_.accepted_per_position[static_cast<size_t>(i)] += 1;
  out.n_spec_drafts = seq.n_spec_drafts;
  out.n_spec_draft_tokens = seq.n_spec_draft_tokens;
  out.n_spec_accepted_tokens = seq.n_spec_accepted_tokens;
  out.n_spec_rejections = seq.n_spec_rejections;
  proposer_->on_verified(seq);
  seq.spec_token_ids.clear();
  seq.spec_tree_parents.clear();
  seq.spec_token_masks.clear();
}

}  // namespace lio
