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
                     BlockManager* swap_space, KvCacheCoordinator* kv_groups)
    : config_(config),
      blocks_(blocks),
      own_kv_(kv_groups == nullptr ? std::make_unique<KvCacheCoordinator>(blocks, std::vector<int64_t>{}) : nullptr),
      kv_(kv_groups != nullptr ? kv_groups : own_kv_.get()),
      cache_(prefix_cache),
      swap_space_(swap_space) {
  config_.validate();
  if (kv_->n_extra_groups() > 0 && swap_space_ != nullptr) {
    throw InvalidArgument("--preemption swap: a sliding-window model's hybrid KV cache is preempted by recompute "
                          "(as vLLM v1 does); use --preemption recompute or --disable-hybrid-kv-cache-manager");
  }
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
      seq->num_computed_tokens > 0 && !seq->block_table.empty()) {
    // HF generate: the finished row stays in the batch, decoding padding, until the batch ends.
    const int64_t pos = seq->num_computed_tokens - 1;
    padding_.push_back({std::move(seq->block_table), std::move(seq->group_block_tables),
                        seq->token_ids()[static_cast<size_t>(pos)], pos});
    seq->block_table.clear();
    seq->group_block_tables.clear();
  }
  free_tables(seq->block_table, seq->group_block_tables);
  if (swap_space_ != nullptr) swap_space_->free(seq->host_block_table);
  seq->host_block_table.clear();
  if (queues_.running.empty() && queues_.swapped.empty()) release_padding();  // the batch has ended
}

void Scheduler::release_padding() {
  for (PaddingRow& row : padding_) free_tables(row.block_table, row.group_block_tables);
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

  int64_t blocks_needed(const Sequence& seq, int64_t n_new) const override {
    if (s_.kv_->n_extra_groups() > 0)  // every group's new blocks, less what slid out of a window
      return s_.kv_->blocks_needed(seq.block_table, tables(seq), seq.num_computed_tokens, n_new);
    return std::max<int64_t>(0, s_.blocks_.blocks_for(seq.num_computed_tokens + n_new) -
                                    static_cast<int64_t>(seq.block_table.size()));
  }

  bool can_allocate(const Sequence& seq, int64_t n_tokens) const override {
    if (s_.kv_->n_extra_groups() > 0)
      return s_.kv_->can_allocate(seq.block_table, tables(seq), seq.num_computed_tokens,
                                  std::max<int64_t>(0, n_tokens - seq.num_computed_tokens));
    return s_.blocks_.can_allocate(seq.block_table, n_tokens);
  }

  bool append_slots(Sequence& seq, int64_t n_new) override {
    return allocate_before_padding([&] {
      return s_.kv_->append_slots(seq.block_table, tables(seq), seq.num_computed_tokens, n_new, out_.copies);
    });
  }

  bool preempt(Sequence& seq) override {
    std::erase(s_.queues_.running, &seq);
    out_.preempted.push_back(&seq);
    seq.n_preemptions += 1;
    if (s_.config_.preemption == PreemptionMode::Swap && s_.swap_space_ != nullptr && seq.num_computed_tokens > 0) {
      // Swap: copy the blocks holding its K/V to host blocks; it resumes where it stopped.
      std::vector<int32_t> host;
      if (s_.swap_space_->allocate(host, seq.num_computed_tokens)) {
        for (size_t k = 0; k < host.size(); ++k) out_.swap_out.push_back({seq.block_table[k], host[k]});
        s_.blocks_.free(seq.block_table);
        seq.host_block_table = std::move(host);
        seq.status = SequenceStatus::Swapped;
        s_.queues_.swapped.push_back(&seq);
        return true;
      }  // swap space full: recompute instead
    }
    // Recompute (vLLM v1's _preempt_request): its K/V are gone; the step requeues it.
    s_.free_tables(seq.block_table, seq.group_block_tables);
    seq.num_computed_tokens = 0;
    return false;
  }

  bool swap_in(Sequence& seq, int64_t n_new) override {
    std::vector<int32_t> table;
    if (s_.swap_space_ == nullptr ||
        !allocate_before_padding([&] { return s_.blocks_.allocate(table, seq.num_computed_tokens + n_new); }))
      return false;
    for (size_t k = 0; k < seq.host_block_table.size(); ++k) out_.swap_in.push_back({seq.host_block_table[k], table[k]});
    s_.swap_space_->free(seq.host_block_table);
    seq.block_table = std::move(table);
    return true;
  }

  bool match_cached_prefix(Sequence& seq) override {
    if (s_.cache_ == nullptr || seq.num_computed_tokens != 0 || !seq.block_table.empty()) return false;
    const int64_t n_hit = s_.kv_->n_extra_groups() > 0
                              ? s_.cache_->match_groups(seq.token_ids(), seq.block_table, tables(seq), *s_.kv_)
                              : s_.cache_->match(seq.token_ids(), seq.block_table);
    seq.num_computed_tokens = n_hit;
    matched_.push_back({&seq, n_hit});
    return true;
  }

  void unmatch_cached_prefix(Sequence& seq) override {
    if (std::erase_if(matched_, [&](const Match& m) { return m.seq == &seq; }) == 0) return;  // not matched
    s_.free_tables(seq.block_table, seq.group_block_tables);  // give the hits back; it looks up again next time
    seq.num_computed_tokens = 0;
  }

  void drop_unfittable(Sequence& seq) override {
    std::erase_if(matched_, [&](const Match& m) { return m.seq == &seq; });
    std::erase(s_.queues_.waiting, &seq);
    std::erase(s_.queues_.running, &seq);
    std::erase(s_.queues_.swapped, &seq);
    s_.free_tables(seq.block_table, seq.group_block_tables);
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

  /// The sequence's extra-group tables, one per group (created empty on first use).
  std::vector<std::vector<int32_t>>& tables(Sequence& seq) const {
    if (static_cast<int64_t>(seq.group_block_tables.size()) != s_.kv_->n_extra_groups())
      seq.group_block_tables = s_.kv_->empty_tables();
    return seq.group_block_tables;
  }
  const std::vector<std::vector<int32_t>>& tables(const Sequence& seq) const {
    return seq.group_block_tables.size() == empty_.size() ? seq.group_block_tables : empty_;
  }

  struct Match {
    Sequence* seq;
    int64_t n_hit;
  };
  Scheduler& s_;
  SchedulerOutput& out_;
  std::vector<Match> matched_;  ///< matched this step and not given back
  std::vector<std::vector<int32_t>> empty_ = s_.kv_->empty_tables();  ///< a new sequence's tables
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
