#include "lio/scheduler.h"

#include <algorithm>
#include <string>

#include "lio/error.h"
#include "lio/scheduler_policy.h"

namespace lio {

SchedulingPolicy parse_scheduling_policy(const std::string& name) {
  if (name == "continuous") return SchedulingPolicy::Continuous;
  if (name == "static") return SchedulingPolicy::Static;
  throw InvalidArgument("--scheduling must be continuous or static, got '" + name + "'");
}

PreemptionMode parse_preemption_mode(const std::string& name) {
  if (name == "recompute") return PreemptionMode::Recompute;
  if (name == "swap") return PreemptionMode::Swap;
  throw InvalidArgument("--preemption must be recompute or swap, got '" + name + "'");
}

const char* scheduling_policy_name(SchedulingPolicy policy) {
  return policy == SchedulingPolicy::Static ? "static" : "continuous";
}

const char* preemption_mode_name(PreemptionMode mode) { return mode == PreemptionMode::Swap ? "swap" : "recompute"; }

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1) throw InvalidArgument("--max-num-seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 1) {
    throw InvalidArgument("--max-num-batched-tokens must be >= 1, got " + std::to_string(max_num_batched_tokens));
  }
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks, PrefixCache* prefix_cache,
                     BlockManager* swap_space)
    : config_(config), blocks_(blocks), cache_(prefix_cache), swap_space_(swap_space) {
  config_.validate();
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  waiting_.push_back(seq);
}

void Scheduler::add_front(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  waiting_.push_front(seq);
}

void Scheduler::remove(Sequence* seq) {
  std::erase(waiting_, seq);
  const bool was_running = std::erase(running_, seq) > 0;
  std::erase(swapped_, seq);
  if (was_running && config_.policy == SchedulingPolicy::Static && config_.static_padding &&
      seq->num_computed_tokens > 0 && !seq->block_table.empty()) {
    // HF generate: the finished row stays in the batch, decoding padding, until the batch ends.
    const int64_t pos = seq->num_computed_tokens - 1;
    padding_.push_back({std::move(seq->block_table), seq->token_ids()[static_cast<size_t>(pos)], pos});
    seq->block_table.clear();
  }
  blocks_.free(seq->block_table);
  if (swap_space_ != nullptr) swap_space_->free(seq->host_block_table);
  seq->host_block_table.clear();
  if (running_.empty() && swapped_.empty()) release_padding();  // the batch has ended
}

void Scheduler::release_padding() {
  for (PaddingRow& row : padding_) blocks_.free(row.block_table);
  padding_.clear();
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput& out) {
  std::erase(running_, seq);
  out.preempted.push_back(seq);
  if (config_.preemption == PreemptionMode::Swap && swap_space_ != nullptr && seq->num_computed_tokens > 0) {
    // Swap: copy the blocks holding its K/V to host blocks; it resumes where it stopped.
    std::vector<int32_t> host;
    if (swap_space_->allocate(host, seq->num_computed_tokens)) {
      for (size_t k = 0; k < host.size(); ++k) out.swap_out.push_back({seq->block_table[k], host[k]});
      blocks_.free(seq->block_table);
      seq->host_block_table = std::move(host);
      seq->status = SequenceStatus::Swapped;
      seq->n_preemptions += 1;
      swapped_.push_back(seq);
      return;
    }  // swap space full: recompute instead
  }
  blocks_.free(seq->block_table);
  requeue_for_recompute(*seq, waiting_);  // Task 3
}

void Scheduler::schedule_running(SchedulerOutput& out, int64_t& budget) {
  std::vector<Sequence*> scheduled;  // this step's, so never a victim
  auto index_of = [&](Sequence* s) { return static_cast<size_t>(std::find(running_.begin(), running_.end(), s) - running_.begin()); };
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t remaining = seq->n_tokens() - seq->num_computed_tokens;
    int64_t n_new = prefill_chunk(remaining, budget, config_.enable_chunked_prefill);  // Task 1
    // Speculative decoding (chapter 06): a decoding sequence's drafts ride in the same step, as
    // many as the budget leaves room for; they are rows like any other.
    if (remaining == 1 && n_new == 1) n_new += std::clamp<int64_t>(seq->num_lookahead_slots, 0, budget - 1);
    if (n_new == 0) {  // static batching's not-yet-fitting prompt: later
      ++i;
      continue;
    }
    // Make room: preempt the latest arrival until this sequence's slots fit.
    bool fits = blocks_.append_slots(seq->block_table, seq->num_computed_tokens, n_new, out.copies);
    if (!fits && !padding_.empty()) {  // padding rows give their blocks up before anyone is preempted
      release_padding();
      fits = blocks_.append_slots(seq->block_table, seq->num_computed_tokens, n_new, out.copies);
    }
    while (!fits) {
      std::vector<Sequence*> candidates;
      for (Sequence* s : running_)
        if (s != seq && std::find(scheduled.begin(), scheduled.end(), s) == scheduled.end()) candidates.push_back(s);
      Sequence* victim = choose_victim(candidates);  // Task 3
      if (victim == nullptr) break;
      preempt(victim, out);
      fits = blocks_.append_slots(seq->block_table, seq->num_computed_tokens, n_new, out.copies);
    }
    if (!fits) {
      if (scheduled.empty()) {  // alone and still no room: it can never grow in this pool
        std::erase(running_, seq);
        blocks_.free(seq->block_table);
        out.unfittable.push_back(seq);
      } else {
        preempt(seq, out);  // the others already hold the blocks this step; retry it later
      }
      i = 0;  // positions shifted; the scheduled ones are skipped below
      while (i < running_.size() && std::find(scheduled.begin(), scheduled.end(), running_[i]) != scheduled.end()) ++i;
      continue;
    }
    out.scheduled.push_back({seq, n_new});
    scheduled.push_back(seq);
    out.n_tokens += n_new;
    budget -= n_new;
    i = index_of(seq) + 1;
  }
}

void Scheduler::resume_swapped(SchedulerOutput& out, int64_t& budget) {
  // Oldest preemption first, while its blocks fit: copy its K/V back and run on.
  while (!swapped_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = swapped_.front();
    const int64_t n_new = prefill_chunk(seq->n_tokens() - seq->num_computed_tokens, budget, true);
    std::vector<int32_t> table;
    if (n_new == 0 || !blocks_.allocate(table, seq->num_computed_tokens + n_new)) break;
    for (size_t k = 0; k < seq->host_block_table.size(); ++k) out.swap_in.push_back({seq->host_block_table[k], table[k]});
    swap_space_->free(seq->host_block_table);
    seq->block_table = std::move(table);
    seq->status = SequenceStatus::Running;
    swapped_.pop_front();
    running_.push_back(seq);
    out.scheduled.push_back({seq, n_new});
    out.n_tokens += n_new;
    budget -= n_new;
  }
}

void Scheduler::admit_waiting(SchedulerOutput& out, int64_t& budget, int64_t n_running_at_start) {
  // No new admissions after a preemption, or while preempted sequences wait in swap.
  if (!out.preempted.empty() || !swapped_.empty()) return;
  const bool is_static = config_.policy == SchedulingPolicy::Static;
  for (int64_t n_admitted = 0; !waiting_.empty();) {
    if (is_static && !static_may_admit(n_running_at_start, n_admitted, config_.max_num_seqs)) break;  // Task 4
    Sequence* seq = waiting_.front();
    if (!config_.enable_chunked_prefill && seq->n_tokens() - seq->num_computed_tokens > config_.max_num_batched_tokens) {
      waiting_.pop_front();  // without chunking no step can ever hold it
      blocks_.free(seq->block_table);
      out.unfittable.push_back(seq);
      continue;
    }
    // Prefix caching: a sequence with nothing computed starts from the longest cached prefix.
    const bool lookup = cache_ != nullptr && seq->num_computed_tokens == 0 && seq->block_table.empty();
    const int64_t n_hit = lookup ? cache_->match(seq->token_ids(), seq->block_table) : 0;
    seq->num_computed_tokens = std::max(seq->num_computed_tokens, n_hit);
    const int64_t chunk = prefill_chunk(seq->n_tokens() - seq->num_computed_tokens, budget,
                                        config_.enable_chunked_prefill);  // Task 1
    const int64_t blocks_needed = std::max<int64_t>(
        0, blocks_.blocks_for(seq->num_computed_tokens + chunk) - static_cast<int64_t>(seq->block_table.size()));
    bool ok = can_admit({static_cast<int64_t>(running_.size()), config_.max_num_seqs, chunk, blocks_needed,
                         blocks_.n_available_blocks()});  // Task 2
    if (is_static && chunk == 0) ok = static_cast<int64_t>(running_.size()) < config_.max_num_seqs;  // joins, runs later
    if (ok && chunk > 0) ok = blocks_.append_slots(seq->block_table, seq->num_computed_tokens, chunk, out.copies);
    if (!ok) {
      if (lookup) {  // give the hits back; look up again next time
        blocks_.free(seq->block_table);
        seq->num_computed_tokens = 0;
      }
      if (running_.empty() && out.scheduled.empty() &&
          !blocks_.can_allocate(seq->block_table, seq->num_computed_tokens + std::max<int64_t>(chunk, 1))) {
        waiting_.pop_front();  // nothing runs and the pool cannot hold it: it would wait forever
        blocks_.free(seq->block_table);
        out.unfittable.push_back(seq);
        continue;
      }
      break;
    }
    if (lookup) {
      cache_->stats.queries += seq->n_tokens();
      cache_->stats.hits += n_hit;
    }
    waiting_.pop_front();
    seq->status = SequenceStatus::Running;
    running_.push_back(seq);
    ++n_admitted;
    if (chunk == 0) continue;
    out.scheduled.push_back({seq, chunk});
    out.n_tokens += chunk;
    budget -= chunk;
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  const auto n_running_at_start = static_cast<int64_t>(running_.size() + swapped_.size());
  schedule_running(out, budget);  // decodes and prompt chunks of running sequences first
  if (out.preempted.empty()) resume_swapped(out, budget);
  admit_waiting(out, budget, n_running_at_start);
  for (const PaddingRow& row : padding_) {  // static batching's finished rows, as budget allows
    if (budget <= 0) break;
    out.padding.push_back(row);
    out.n_tokens += 1;
    budget -= 1;
  }
  return out;
}

}  // namespace lio
