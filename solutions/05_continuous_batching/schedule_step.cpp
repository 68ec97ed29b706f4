// Chapter 05, Task 1 — reference solution: the scheduling step, with the decisions inside it.
// Declaration and contract: common/engine/include/lio/scheduler_policy.h.
#include <algorithm>
#include <deque>
#include <span>
#include <vector>

#include "lio/scheduler_policy.h"

namespace lio {

namespace {

// The step's decisions (sections 1, 4 and 5 of the lesson derive each), private to this file.

/// Rows a sequence with `remaining` uncomputed tokens runs, with `budget` rows left this step.
int64_t prefill_chunk(int64_t remaining, int64_t budget, bool chunked_prefill) {
  if (remaining <= 0 || budget <= 0) return 0;
  if (chunked_prefill) return std::min(remaining, budget);  // split a long prompt over steps
  return remaining <= budget ? remaining : 0;                // whole, or wait
}

/// What admitting one waiting sequence would take.
struct AdmissionRequest {
  int64_t n_running = 0;         // sequences already running this step
  int64_t max_num_seqs = 0;      // the limit on running sequences
  int64_t chunk_tokens = 0;      // rows it would run this step (prefill_chunk)
  int64_t blocks_needed = 0;     // new KV blocks those rows need
  int64_t blocks_available = 0;  // blocks the pool can hand out now
};

/// Continuous batching's admission: a seat, rows this step, and the blocks for them.
bool can_admit(const AdmissionRequest& r) {
  const auto& [n_running, max_num_seqs, chunk_tokens, blocks_needed, blocks_available] = r;
  return n_running < max_num_seqs             // a seat
         && chunk_tokens > 0                  // rows this step (an unchunked prompt fits whole)
         && blocks_needed <= blocks_available;  // the blocks for them
}

/// FCFS's preemption victim among `candidates` (Kwon et al. 2023, sec. 4.5); nullptr if none.
Sequence* choose_victim(std::span<Sequence* const> candidates) {
  Sequence* victim = nullptr;
  for (Sequence* s : candidates) {
    if (victim == nullptr || s->arrival_time > victim->arrival_time ||
        (s->arrival_time == victim->arrival_time && s->id() > victim->id())) {
      victim = s;  // the latest arrival has the lowest priority: it loses its blocks
    }
  }
  return victim;
}

/// A victim preempted by recompute (its blocks freed, nothing computed) back in `waiting`.
void requeue_for_recompute(Sequence& victim, std::deque<Sequence*>& waiting) {
  victim.status = SequenceStatus::Waiting;
  waiting.push_front(&victim);  // ahead of everything that arrived after it
}

/// Static batching's admission (HF generate): only between batches, at most max_num_seqs.
bool static_may_admit(int64_t n_running_at_step_start, int64_t n_admitted_this_step, int64_t max_num_seqs) {
  return n_running_at_step_start == 0 && n_admitted_this_step < max_num_seqs;
}

/// Preempts `victim` through `ops`; one preempted by recompute goes back to `waiting`.
void preempt(Sequence& victim, SchedulerQueues& queues, SchedulerOps& ops) {
  if (!ops.preempt(victim)) requeue_for_recompute(victim, queues.waiting);
}

}  // namespace

std::vector<ScheduledSequence> schedule_step(const SchedulerConfig& config, SchedulerQueues& queues,
                                             SchedulerOps& ops) {
  std::vector<ScheduledSequence> batch;
  int64_t budget = config.max_num_batched_tokens;  // rows left this step
  const auto n_running_at_start =
      static_cast<int64_t>(queues.running.size() + queues.swapped.size());
  bool preempted = false;
  auto is_running = [&](const Sequence* s) {
    return std::find(queues.running.begin(), queues.running.end(), s) != queues.running.end();
  };
  auto in_batch = [&](const Sequence* s) {
    return std::any_of(batch.begin(), batch.end(),
                       [&](const ScheduledSequence& b) { return b.seq == s; });
  };

  // 1. Running sequences first: decodes, and prompts still being chunked.
  const std::vector<Sequence*> running(queues.running.begin(), queues.running.end());
  for (Sequence* seq : running) {
    if (budget <= 0) break;
    if (!is_running(seq)) continue;  // preempted earlier in this step
    const int64_t remaining = seq->n_tokens() - seq->num_computed_tokens;
    int64_t n_new = prefill_chunk(remaining, budget, config.enable_chunked_prefill);
    // Speculative decoding (chapter 06): a decoding sequence's drafts ride in the same step, as
    // many as the budget leaves room for; they are rows like any other.
    if (remaining == 1 && n_new == 1)
      n_new += std::clamp<int64_t>(seq->num_lookahead_slots, 0, budget - 1);
    if (n_new == 0) continue;  // static batching's not-yet-fitting prompt: later
    bool fits = ops.append_slots(*seq, n_new);
    while (!fits) {  // make room: the latest arrival not yet scheduled loses its blocks
      std::vector<Sequence*> candidates;
      for (Sequence* s : queues.running)
        if (s != seq && !in_batch(s)) candidates.push_back(s);
      Sequence* victim = choose_victim(candidates);
      if (victim == nullptr) break;
      preempt(*victim, queues, ops);
      preempted = true;
      fits = ops.append_slots(*seq, n_new);
    }
    if (!fits) {
      if (batch.empty()) {
        ops.drop_unfittable(*seq);  // alone and still no room: it can never grow in this pool
      } else {
        preempt(*seq, queues, ops);  // the others already hold the blocks this step; retry it later
        preempted = true;
      }
      continue;
    }
    batch.push_back({seq, n_new});
    budget -= n_new;
  }

  // 2. Only if nobody was preempted: swapped sequences, oldest preemption first, while a seat,
  //    the budget and blocks last.
  while (!preempted && !queues.swapped.empty() && budget > 0 &&
         static_cast<int64_t>(queues.running.size()) < config.max_num_seqs) {
    Sequence* seq = queues.swapped.front();
    // Chunked whatever the setting: it ran before, and a remainder waiting for a budget it can
    // never get would hold up the queue behind it.
    const int64_t n_new =
        prefill_chunk(seq->n_tokens() - seq->num_computed_tokens, budget, true);
    if (n_new == 0 || !ops.swap_in(*seq, n_new)) break;
    queues.swapped.pop_front();
    seq->status = SequenceStatus::Running;
    queues.running.push_back(seq);
    batch.push_back({seq, n_new});
    budget -= n_new;
  }

  // 3. Waiting sequences, first come first served; none after a preemption or while any is
  //    swapped out (vLLM: preempted requests finish before new ones are accepted).
  if (preempted || !queues.swapped.empty()) return batch;
  const bool is_static = config.policy == SchedulingPolicy::Static;
  for (int64_t n_admitted = 0; !queues.waiting.empty();) {
    if (is_static && !static_may_admit(n_running_at_start, n_admitted, config.max_num_seqs))
      break;  // a batch is running, or this one is full
    Sequence* seq = queues.waiting.front();
    if (!config.enable_chunked_prefill &&
        seq->n_tokens() - seq->num_computed_tokens > config.max_num_batched_tokens) {
      ops.drop_unfittable(*seq);  // without chunking no step can ever hold it
      continue;
    }
    const bool matched = ops.match_cached_prefix(*seq);  // chapter 04: start from a cached prefix
    const int64_t chunk = prefill_chunk(seq->n_tokens() - seq->num_computed_tokens, budget,
                                        config.enable_chunked_prefill);
    const auto n_running = static_cast<int64_t>(queues.running.size());
    bool ok = can_admit({n_running, config.max_num_seqs, chunk, ops.blocks_needed(*seq, chunk),
                         ops.n_available_blocks()});
    if (is_static && chunk == 0)
      ok = n_running < config.max_num_seqs;  // joins its batch, runs later
    if (ok && chunk > 0) ok = ops.append_slots(*seq, chunk);
    if (!ok) {
      if (matched) ops.unmatch_cached_prefix(*seq);
      // Nothing runs and the pool cannot hold it: it would wait forever.
      if (queues.running.empty() && batch.empty() &&
          !ops.can_allocate(*seq, seq->num_computed_tokens + std::max<int64_t>(chunk, 1))) {
        ops.drop_unfittable(*seq);
        continue;
      }
      break;  // FCFS: nobody overtakes it
    }
    queues.waiting.pop_front();
    seq->status = SequenceStatus::Running;
    queues.running.push_back(seq);
    ++n_admitted;
    if (chunk == 0) continue;
    batch.push_back({seq, chunk});
    budget -= chunk;
  }
  return batch;
}

}  // namespace lio
