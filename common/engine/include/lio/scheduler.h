// scheduler.h — which sequences run in the next step, and how many tokens each.
//
// Iteration-level scheduling (Yu et al. 2022, Orca) with vLLM v1's policy: FCFS with a token
// budget. Each step, running sequences go first — 1 token each when decoding, the next chunk of
// their prompt while prefilling — then swapped-out sequences come back if their blocks fit, then
// waiting ones join in arrival order while seats (`max_num_seqs`), the token budget
// (`max_num_batched_tokens`) and blocks last. Prefill and decode rows mix in one step; a prompt
// longer than the budget left is split (chunked prefill; Agrawal et al. 2024, Sarathi-Serve).
// When the pool has no block for a running sequence, one is preempted under FCFS (Kwon et
// al. 2023, sec. 4.5; chapter 05's Task 1 picks it): recompute (its blocks freed, its tokens
// prefilled again later: vLLM's default) or swap (its K/V copied to a host swap space and back
// when blocks free up; vLLM v0).
// With a prefix cache a sequence admitted with nothing computed starts from the longest cached
// prefix; every sequence's next slots come from BlockManager::append_slots (copy-on-write).
// Static batching (`SchedulingPolicy::Static`, the baseline of chapter 05) admits a batch only
// when nothing runs and lets no request join until the whole batch has finished; as in HF
// `generate`, a finished request's row stays in the batch as padding until then (it keeps
// its blocks and re-runs its last computed token, writing nothing).
// Speculative decoding (chapter 06): a decoding sequence with num_lookahead_slots > 0 gets up to
// that many extra rows (its drafts) in the same step, as far as the token budget allows, and
// slots for them (vLLM's lookahead slots); the engine gives back the rejected ones after the pass.
// The step itself, with every decision inside it, is chapter 05's exercise point
// (lio/scheduler_policy.h: schedule_step, Task 1); this class owns the queues
// and lends the step its block operations. The copies decided here are carried out by the
// Engine before the forward pass.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "lio/block_manager.h"
#include "lio/kv_cache_coordinator.h"
#include "lio/prefix_cache.h"
#include "lio/sequence.h"

namespace lio {

/// When requests may join the running batch.
enum class SchedulingPolicy {
  Continuous,  ///< every step (iteration-level scheduling, Orca / vLLM)
  Static,      ///< only when the previous batch has wholly finished (HF generate-style)
};

/// What happens to a preempted sequence's K/V.
enum class PreemptionMode {
  Recompute,  ///< dropped; the tokens are prefilled again when it resumes (vLLM's default)
  Swap,       ///< copied to host swap space and back (vLLM v0); recompute when swap is full
};

/// The policy's name, as --scheduling takes it (lio/cli_parse.h parse_scheduling_policy).
const char* scheduling_policy_name(SchedulingPolicy policy);
/// The mode's name, as --preemption takes it (lio/cli_parse.h parse_preemption_mode).
const char* preemption_mode_name(PreemptionMode mode);

/// Scheduler limits and policies (vLLM's names).
struct SchedulerConfig {
  int64_t max_num_seqs = 64;             ///< sequences in one step at most
  int64_t max_num_batched_tokens = 512;  ///< tokens (rows) in one step at most
  bool enable_chunked_prefill = true;    ///< false: a prompt runs whole or waits
  SchedulingPolicy policy = SchedulingPolicy::Continuous;  ///< when requests may join
  PreemptionMode preemption = PreemptionMode::Recompute;   ///< what preemption does to K/V
  /// Static batching only: a finished request's row keeps running as padding until its batch
  /// ends, as in HF `generate` (true), or leaves the batch at once (false; cheaper steps).
  bool static_padding = true;

  /// Throws InvalidArgument if a limit is < 1.
  void validate() const;
};

/// One sequence's share of a step.
struct ScheduledSequence {
  Sequence* seq = nullptr;   ///< not owned
  int64_t n_new_tokens = 0;  ///< tokens from num_computed_tokens on to run this step
};

/// A finished request's row that static batching keeps running until its batch ends (HF
/// `generate` decodes padding for finished rows). It re-runs the last computed token at its
/// position, reading the blocks it still holds and writing no K/V (kPadSlotId); its output is
/// discarded.
struct PaddingRow {
  GroupTables block_tables;  ///< the finished sequence's tables (one per group), held until the batch ends
  int32_t token = 0;         ///< its last computed token
  int64_t position = 0;      ///< that token's position (its K/V are in block_tables)
};

/// What schedule() decided.
struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;  ///< in batch order
  std::vector<Sequence*> preempted;          ///< preempted during this call
  /// Sequences that can never fit the pool alone (finished by the engine with Length).
  std::vector<Sequence*> unfittable;
  /// Copies to make before the forward pass, in this order: swap-outs (src = device block,
  /// dst = host swap block), then swap-ins (src = host block, dst = device block), then
  /// copy-on-write copies (device to device).
  std::vector<BlockCopy> swap_out;
  std::vector<BlockCopy> swap_in;  ///< host block -> device block, after the swap-outs
  std::vector<BlockCopy> copies;   ///< copy-on-write, device -> device, last
  std::vector<PaddingRow> padding;  ///< static batching's finished rows, after `scheduled`
  int64_t n_tokens = 0;  ///< total rows scheduled, padding included
};

/// The Scheduler's three queues, as schedule_step (Task 1) sees them (front = first in line).
struct SchedulerQueues {
  std::deque<Sequence*> waiting;  ///< new, or preempted to be recomputed (those at the front)
  std::deque<Sequence*> running;  ///< holding KV blocks, in admission order
  std::deque<Sequence*> swapped;  ///< K/V in the host swap space, oldest preemption first
};

/// FCFS scheduler over a BlockManager. Holds non-owning Sequence pointers. Not thread-safe.
class Scheduler {
 public:
  /// `prefix_cache` may be nullptr (no prefix caching); `swap_space` (host block ids of the
  /// swap space) may be nullptr, which makes Swap preemption recompute. Throws InvalidArgument
  /// if `config` is invalid.
  /// `kv_groups` (may be nullptr: one full-attention KV cache group) allocates every group's
  /// table over `blocks`, and is the only allocator the scheduler uses; it must outlive the
  /// scheduler. Swap preemption moves every group's blocks (KvCacheCoordinator::swap_out).
  Scheduler(const SchedulerConfig& config, BlockManager& blocks, PrefixCache* prefix_cache = nullptr,
            BlockManager* swap_space = nullptr, KvCacheCoordinator* kv_groups = nullptr);

  /// Queues a new sequence (status Waiting) at the back.
  void add(Sequence* seq);
  /// Queues a sequence at the front (a forked sample holding its shared prompt blocks).
  void add_front(Sequence* seq);
  /// Removes `seq` from whichever queue holds it and frees its blocks (device and host).
  /// Static batching with `static_padding`: a running sequence's blocks stay held by a
  /// PaddingRow until the last sequence of its batch is removed.
  void remove(Sequence* seq);
  /// Picks the next step's sequences and allocates their slots: schedule_step (Task 1,
  /// solutions|exercises/05_continuous_batching/schedule_step.cpp) over this scheduler's queues
  /// and blocks, then static batching's padding rows as the budget allows.
  SchedulerOutput schedule();

  /// True while a sequence waits, runs or is swapped out.
  bool has_unfinished() const {
    return !queues_.waiting.empty() || !queues_.running.empty() || !queues_.swapped.empty();
  }
  /// Sequences waiting (new, or preempted and to be recomputed).
  int64_t n_waiting() const { return static_cast<int64_t>(queues_.waiting.size()); }
  /// Sequences holding KV blocks.
  int64_t n_running() const { return static_cast<int64_t>(queues_.running.size()); }
  /// Sequences whose K/V are in the host swap space.
  int64_t n_swapped() const { return static_cast<int64_t>(queues_.swapped.size()); }
  /// The queues, front first (read-only: add, add_front and remove change them).
  const SchedulerQueues& queues() const { return queues_; }
  /// Static batching's padding rows (finished requests whose batch still runs).
  int64_t n_padding() const { return static_cast<int64_t>(padding_.size()); }
  /// The limits and policies.
  const SchedulerConfig& config() const { return config_; }

 private:
  class StepOps;  // SchedulerOps over this scheduler, for one schedule() call
  void release_padding();
  SchedulerConfig config_;
  BlockManager& blocks_;
  std::unique_ptr<KvCacheCoordinator> own_kv_;  ///< one group, when none was given
  KvCacheCoordinator* kv_;
  PrefixCache* cache_;
  BlockManager* swap_space_;
  SchedulerQueues queues_;
  std::vector<PaddingRow> padding_;  ///< static batching's finished rows
};

}  // namespace lio
