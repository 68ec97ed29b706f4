#include "lio/scheduler.h"

#include <algorithm>
#include <string>

#include "lio/error.h"

namespace lio {

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1) throw InvalidArgument("--max-num-seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 1) {
    throw InvalidArgument("--max-num-batched-tokens must be >= 1, got " + std::to_string(max_num_batched_tokens));
  }
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks, PrefixCache* prefix_cache)
    : config_(config), blocks_(blocks), cache_(prefix_cache) {
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
  std::erase(running_, seq);
  blocks_.free(seq->block_table);
}

void Scheduler::preempt(Sequence* seq) {
  // Recompute preemption: drop the K/V, keep the tokens; the prefix is prefilled again later.
  std::erase(running_, seq);
  blocks_.free(seq->block_table);
  seq->num_computed_tokens = 0;
  seq->status = SequenceStatus::Waiting;
  seq->n_preemptions += 1;
  waiting_.push_front(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  // ---- running sequences first, oldest first
  std::vector<Sequence*> scheduled_running;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t remaining = seq->n_tokens() - seq->num_computed_tokens;
    const int64_t n_new = std::min(remaining, budget);
    // Make room: preempt the newest running sequence until this one's slots fit.
    bool fits = blocks_.append_slots(seq->block_table, seq->num_computed_tokens, n_new, out.copies);
    while (!fits) {
      Sequence* victim = running_.back();
      const bool victim_scheduled =
          std::find(scheduled_running.begin(), scheduled_running.end(), victim) != scheduled_running.end();
      if (victim == seq || victim_scheduled) break;
      preempt(victim);
      out.preempted.push_back(victim);
      fits = blocks_.append_slots(seq->block_table, seq->num_computed_tokens, n_new, out.copies);
    }
    if (!fits) {
      if (scheduled_running.empty()) {
        // Alone and still no room: it can never grow in this pool.
        std::erase(running_, seq);
        blocks_.free(seq->block_table);
        out.unfittable.push_back(seq);
        continue;
      }
      preempt(seq);  // others already hold the blocks this step; retry it later
      out.preempted.push_back(seq);
      continue;
    }
    out.scheduled.push_back({seq, n_new});
    scheduled_running.push_back(seq);
    out.n_tokens += n_new;
    budget -= n_new;
    ++i;
  }
  // ---- then waiting sequences in arrival order (no new admissions after a preemption)
  while (!waiting_.empty() && out.preempted.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    // Prefix caching: a sequence with nothing computed starts from the longest cached prefix.
    const bool lookup = cache_ != nullptr && seq->num_computed_tokens == 0 && seq->block_table.empty();
    const int64_t n_hit = lookup ? cache_->match(seq->token_ids(), seq->block_table) : 0;
    seq->num_computed_tokens = std::max(seq->num_computed_tokens, n_hit);
    const int64_t remaining = seq->n_tokens() - seq->num_computed_tokens;
    const int64_t n_new = std::min(remaining, budget);
    const bool fits = (config_.enable_chunked_prefill || remaining <= budget) &&
                      blocks_.append_slots(seq->block_table, seq->num_computed_tokens, n_new, out.copies);
    if (!fits) {
      if (lookup) {  // give the hits back; look up again next time
        blocks_.free(seq->block_table);
        seq->num_computed_tokens = 0;
      }
      if (remaining > budget && !config_.enable_chunked_prefill) break;
      if (running_.empty() && !blocks_.can_allocate(seq->block_table, seq->num_computed_tokens + n_new)) {
        // Nothing runs and the pool cannot hold it: it would wait forever.
        waiting_.pop_front();
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
    out.scheduled.push_back({seq, n_new});
    out.n_tokens += n_new;
    budget -= n_new;
  }
  return out;
}

}  // namespace lio
