// scheduler.h — which sequences run in the next step, and how many tokens each.
//
// FCFS with a token budget, as vLLM v1's `Scheduler.schedule()` and nano-vllm's: running
// sequences first (each gets its remaining tokens — 1 when decoding, a chunk of its prompt
// while prefilling), then waiting ones in arrival order while seats (`max_num_seqs`) and the
// token budget (`max_num_batched_tokens`) last. A prompt longer than the budget left is split
// into chunks (chunked prefill). When the pool has no block for a running sequence, the newest
// running sequence is preempted: its blocks are freed, its computed tokens reset to 0, and it
// goes back to the front of the waiting queue to be recomputed later (vLLM's "recompute"
// preemption; Kwon et al. 2023, sec. 4.5). With a prefix cache, a sequence admitted with no
// computed tokens first takes the longest cached prefix of its tokens (its num_computed_tokens
// starts there); every sequence's next slots come from BlockManager::append_slots, whose
// copy-on-write copies the engine carries out before the forward pass. Chapter 05 completes it.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "lio/block_manager.h"
#include "lio/prefix_cache.h"
#include "lio/sequence.h"

namespace lio {

/// Scheduler limits (vLLM's names).
struct SchedulerConfig {
  int64_t max_num_seqs = 64;             ///< sequences in one step at most
  int64_t max_num_batched_tokens = 512;  ///< tokens (rows) in one step at most
  bool enable_chunked_prefill = true;    ///< false: a prompt runs whole or waits

  /// Throws InvalidArgument if a limit is < 1.
  void validate() const;
};

/// One sequence's share of a step.
struct ScheduledSequence {
  Sequence* seq = nullptr;   ///< not owned
  int64_t n_new_tokens = 0;  ///< tokens from num_computed_tokens on to run this step
};

/// What schedule() decided.
struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;  ///< in batch order
  std::vector<Sequence*> preempted;          ///< preempted during this call
  /// Sequences that can never fit the pool alone (finished by the engine with Length).
  std::vector<Sequence*> unfittable;
  /// Copy-on-write copies to make before the forward pass, in order.
  std::vector<BlockCopy> copies;
  int64_t n_tokens = 0;  ///< total rows scheduled
};

/// FCFS scheduler over a BlockManager. Holds non-owning Sequence pointers. Not thread-safe.
class Scheduler {
 public:
  /// `prefix_cache` may be nullptr (no prefix caching). Throws InvalidArgument if `config` is
  /// invalid.
  Scheduler(const SchedulerConfig& config, BlockManager& blocks, PrefixCache* prefix_cache = nullptr);

  /// Queues a new sequence (status Waiting) at the back.
  void add(Sequence* seq);
  /// Queues a sequence at the front (a forked sample holding its shared prompt blocks).
  void add_front(Sequence* seq);
  /// Removes `seq` from whichever queue holds it and frees its blocks.
  void remove(Sequence* seq);
  /// Picks the next step's sequences and allocates their slots.
  SchedulerOutput schedule();

  /// True while a sequence waits or runs.
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  /// Sequences waiting (new, or preempted and to be recomputed).
  int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  /// Sequences holding KV blocks.
  int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
  /// The limits.
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(Sequence* seq);
  SchedulerConfig config_;
  BlockManager& blocks_;
  PrefixCache* cache_;
  std::deque<Sequence*> waiting_;
  std::deque<Sequence*> running_;
};

}  // namespace lio
