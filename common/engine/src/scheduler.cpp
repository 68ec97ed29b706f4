#include "lio/scheduler.h"

#include <algorithm>
#include <limits>
#include <string>

#include "lio/error.h"
#include "lio/scheduler_policy.h"

namespace lio {

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
                     BlockManager* swap_space, KvCacheCoordinator* kv_groups)
    : config_(config),
      blocks_(blocks),
      own_kv_(kv_groups == nullptr ? std::make_unique<KvCacheCoordinator>(blocks, std::vector<int64_t>{0}) : nullptr),
      kv_(kv_groups != nullptr ? kv_groups : own_kv_.get()),
      cache_(prefix_cache),
      swap_space_(swap_space) {
  config_.validate();
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  queues_.waiting.push_back(seq);
}

void Scheduler::add_front(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  queues_.waiting.push_front(seq);
}

void Scheduler::remove(Sequence* seq) {
  std::erase(queues_.waiting, seq);
  const bool was_running = std::erase(queues_.running, seq) > 0;
  std::erase(queues_.swapped, seq);
  if (was_running && config_.policy == SchedulingPolicy::Static && config_.static_padding &&
      seq->num_computed_tokens > 0 && seq->holds_blocks()) {
    // HF generate: the finished row stays in the batch, decoding padding, until the batch ends.
    const int64_t pos = seq->num_computed_tokens - 1;
    padding_.push_back({std::move(seq->block_tables), seq->token_ids()[static_cast<size_t>(pos)], pos});
    seq->block_tables.clear();
  }
  kv_->free(seq->block_tables);
  if (swap_space_ != nullptr) KvCacheCoordinator::free_host(*swap_space_, seq->host_block_tables);
  seq->host_block_tables.clear();
  if (queues_.running.empty() && queues_.swapped.empty()) release_padding();  // the batch has ended
}

void Scheduler::release_padding() {
  for (PaddingRow& row : padding_) kv_->free(row.block_tables);
  padding_.clear();
}

// ---- the block operations schedule_step (Task 1) may use ------------------------------------

/// SchedulerOps over one Scheduler for one schedule() call: the copies and the preempted and
/// unfittable sequences go to `out`. Prefix-cache statistics count the sequences that matched
/// and were admitted (commit_prefix_stats, after the step).
class Scheduler::StepOps final : public SchedulerOps {
 public:
  StepOps(Scheduler& s, SchedulerOutput& out) : s_(s), out_(out) {}

  int64_t n_available_blocks() const override { return s_.blocks_.n_available_blocks(); }

  // Every group's new blocks and copy-on-write copies, less what slid out of a window.
  int64_t blocks_needed(const Sequence& seq, int64_t n_new) const override {
    return s_.kv_->blocks_needed(seq.block_tables, seq.num_computed_tokens, n_new);
  }

  bool can_allocate(const Sequence& seq, int64_t n_tokens) const override {
    return s_.kv_->can_allocate(seq.block_tables, seq.num_computed_tokens,
                                std::max<int64_t>(0, n_tokens - seq.num_computed_tokens));
  }

  bool append_slots(Sequence& seq, int64_t n_new) override {
    return allocate_before_padding(
        [&] { return s_.kv_->append_slots(seq.block_tables, seq.num_computed_tokens, n_new, out_.copies); });
  }

  bool preempt(Sequence& seq) override {
    std::erase(s_.queues_.running, &seq);
    out_.preempted.push_back(&seq);
    seq.n_preemptions += 1;
    if (s_.config_.preemption == PreemptionMode::Swap && s_.swap_space_ != nullptr && seq.num_computed_tokens > 0) {
      // Swap (vLLM v0's; v1 only recomputes): copy every group's blocks holding its K/V to host
      // blocks; it resumes where it stopped.
      if (s_.kv_->swap_out(seq.block_tables, seq.num_computed_tokens, *s_.swap_space_, seq.host_block_tables,
                           out_.swap_out)) {
        seq.status = SequenceStatus::Swapped;
        s_.queues_.swapped.push_back(&seq);
        return true;
      }  // swap space full: recompute instead
    }
    // Recompute (vLLM v1's _preempt_request): its K/V are gone; the step requeues it.
    s_.kv_->free(seq.block_tables);
    seq.num_computed_tokens = 0;
    return false;
  }

  bool swap_in(Sequence& seq, int64_t n_new) override {
    return s_.swap_space_ != nullptr && allocate_before_padding([&] {
             return s_.kv_->swap_in(seq.host_block_tables, seq.num_computed_tokens, n_new, *s_.swap_space_,
                                    seq.block_tables, out_.swap_in);
           });
  }

  bool match_cached_prefix(Sequence& seq) override {
    if (s_.cache_ == nullptr || seq.num_computed_tokens != 0 || seq.holds_blocks()) return false;
    seq.block_tables = s_.kv_->empty_tables();
    const int64_t n_hit = s_.cache_->match(seq.token_ids(), seq.block_tables, *s_.kv_);
    seq.num_computed_tokens = n_hit;
    matched_.push_back({&seq, n_hit});
    return true;
  }

  void unmatch_cached_prefix(Sequence& seq) override {
    if (std::erase_if(matched_, [&](const Match& m) { return m.seq == &seq; }) == 0) return;  // not matched
    s_.kv_->free(seq.block_tables);  // give the hits back; it looks up again next time
    seq.num_computed_tokens = 0;
    // Nothing runs, so the prefix cache is all that holds the pool's blocks. A hit that pins them
    // can leave too few for the rest (a radix hit ending inside a block needs a copy-on-write
    // copy) while the sequence would fit with no hit at all, and the same lookup would fail again
    // every step: a livelock. Give every block the cache can free back, so the next step admits
    // the sequence from scratch (it inserts its prompt again as it runs).
    if (s_.queues_.running.empty()) s_.cache_->evict(std::numeric_limits<int64_t>::max());
  }

  void drop_unfittable(Sequence& seq) override {
    std::erase_if(matched_, [&](const Match& m) { return m.seq == &seq; });
    std::erase(s_.queues_.waiting, &seq);
    std::erase(s_.queues_.running, &seq);
    std::erase(s_.queues_.swapped, &seq);
    s_.kv_->free(seq.block_tables);
    out_.unfittable.push_back(&seq);
  }

  /// Counts the prefix-cache lookups of the sequences admitted this step.
  void commit_prefix_stats() {
    for (const Match& m : matched_) {
      s_.cache_->stats.queries += m.seq->n_tokens();
      s_.cache_->stats.hits += m.n_hit;
    }
    matched_.clear();
  }

 private:
  /// Runs `allocate` (a block allocation returning whether it fit); if it did not and static
  /// batching's padding rows hold blocks, releases them and tries once more. Padding gives its
  /// blocks up before anyone is preempted, and before a swapped-out row waits for them: a
  /// static batch whose rows all finished or were swapped out would otherwise wait forever.
  template <class Allocate>
  bool allocate_before_padding(Allocate&& allocate) {
    if (allocate()) return true;
    if (s_.padding_.empty()) return false;
    s_.release_padding();
    return allocate();
  }

  struct Match {
    Sequence* seq;
    int64_t n_hit;
  };
  Scheduler& s_;
  SchedulerOutput& out_;
  std::vector<Match> matched_;  ///< matched this step and not given back
};

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  StepOps ops(*this, out);
  out.scheduled = schedule_step(config_, queues_, ops);  // chapter 05, Task 1
  ops.commit_prefix_stats();
  for (const ScheduledSequence& s : out.scheduled) out.n_tokens += s.n_new_tokens;
  int64_t budget = config_.max_num_batched_tokens - out.n_tokens;
  for (const PaddingRow& row : padding_) {  // static batching's finished rows, as budget allows
    if (budget <= 0) break;
    out.padding.push_back(row);
    out.n_tokens += 1;
    budget -= 1;
  }
  return out;
}

}  // namespace lio
