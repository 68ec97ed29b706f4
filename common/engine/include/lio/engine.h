// engine.h — the serving loop: requests in, per-step token and text deltas out.
//
// One step (vLLM v1 `EngineCore.step`, nano-vllm `LLMEngine.step`) reads on one screen:
//   schedule -> build the ForwardBatch -> run (ModelRunner) -> sample -> post-process -> emit.
// One thread drives step(); any thread may add or abort requests: they land in an inbox that
// the next step() drains, so the loop never races with a caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lio/block_manager.h"
#include "lio/engine_step.h"
#include "lio/forward_batch.h"
#include "lio/model_runner.h"
#include "lio/prefix_cache.h"
#include "lio/scheduler.h"
#include "lio/sequence.h"
#include "lio/spec_decode.h"
#include "lio/speculative.h"
#include "lio/speculative_decoder.h"
#include "lio/tokenizer.h"

namespace lio {

/// Engine settings.
struct EngineConfig {
  SchedulerConfig scheduler;  ///< batch limits
  /// Host swap space for PreemptionMode::Swap, MiB (chapter 05); unused otherwise.
  int64_t swap_space_mib = 1024;
  /// Prefix caching (chapter 04): none, a hash chain of full blocks, or a radix tree.
  PrefixCacheMode prefix_cache = PrefixCacheMode::None;
  /// false: chapter 01's baseline without a KV cache — after every step each sequence's
  /// computed tokens are forgotten, so the next step recomputes its whole prefix.
  bool reuse_kv = true;
  /// Speculative decoding (chapter 06): who drafts and how many tokens per step.
  SpeculativeConfig speculative;
  /// true: no CUDA graphs, every decode step launches its kernels one by one (vLLM's
  /// --enforce-eager). false: the Engine captures the decode graphs at start-up
  /// (ModelRunner::capture_decode_graphs; nothing on the CPU). The default stays true until a
  /// GPU check has run the graph path (issue 45): a replay nobody has compared on a card could
  /// give wrong tokens silently, so graphs are opt-in (--cuda-graphs) until then.
  bool enforce_eager = true;
};

/// Counters over the engine's life.
struct EngineStats {
  int64_t n_steps = 0;                   ///< step() calls that ran a forward pass
  int64_t n_preemptions = 0;             ///< sequences preempted (blocks freed, recomputed later)
  int64_t n_prompt_tokens_computed = 0;  ///< prefill rows run (recomputation included)
  int64_t n_decode_tokens = 0;           ///< decode rows run
  int64_t max_running = 0;               ///< most sequences in one step
  int64_t peak_blocks_used = 0;          ///< most KV blocks held at once (after a schedule)
  int64_t peak_tokens_held = 0;          ///< most token positions with K/V at once, all sequences
  int64_t n_block_copies = 0;            ///< copy-on-write block copies made
  int64_t n_forks = 0;                   ///< samples forked off a computed prompt (n > 1)
  int64_t n_blocks_swapped_out = 0;      ///< blocks copied to host swap space
  int64_t n_blocks_swapped_in = 0;       ///< blocks copied back
  int64_t n_padding_tokens = 0;          ///< static batching's padding rows run (output discarded)
  /// Speculative decoding (chapter 06; vLLM's `spec_decode_num_drafts`, `_num_draft_tokens`,
  /// `_num_accepted_tokens`): verification rounds with at least one draft, drafts verified,
  /// drafts accepted. Acceptance rate = accepted / draft tokens; mean accepted length =
  /// accepted / drafts; tokens per target pass = 1 + accepted / drafts.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;     ///< see spec_num_drafts
  int64_t spec_num_accepted_tokens = 0;  ///< see spec_num_drafts
  /// Rounds whose draft at depth i + 1 was accepted (vLLM's num_accepted_tokens_per_pos;
  /// SpecDecodeStats::accepted_per_position): the acceptance of Medusa head i, of draft i.
  std::vector<int64_t> spec_accepted_per_position;
  /// Structured outputs (lio/grammar.h): token masks computed (one per constrained sequence
  /// per step, plus one per draft it verifies) and the wall time they took, seconds (the
  /// engine thread, before the pass).
  int64_t n_grammar_masks = 0;
  double grammar_mask_seconds = 0;  ///< see n_grammar_masks
};

/// One request the engine holds, as EngineSnapshot lists it.
struct RequestState {
  int64_t request_id = 0;  ///< add_request()'s id
  bool scheduled = false;  ///< a step has run it at least once (it left the queue)
};

/// The engine's state after a step, in one read: what a server's gauges and a chapter
/// program's summary need, without reaching into the scheduler, block manager or prefix cache.
/// Counts follow vLLM's metrics (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
/// `vllm:gpu_cache_usage_perc`, `vllm:prefix_cache_queries` / `_hits`), per sequence (a request
/// with n samples counts n times once it forks).
struct EngineSnapshot {
  int64_t n_running = 0;   ///< sequences in the running set
  int64_t n_waiting = 0;   ///< sequences waiting for their first (or next, after recompute) step
  int64_t n_swapped = 0;   ///< sequences whose blocks sit in host swap space
  int64_t n_blocks = 0;    ///< KV blocks in the pool
  int64_t n_used_blocks = 0;      ///< blocks with a holder (a sequence or the prefix cache)
  int64_t n_evictable_blocks = 0; ///< of those, blocks only the prefix cache holds (reusable at once)
  /// (n_used_blocks - n_evictable_blocks) / n_blocks, 0-1: the pool's share that running work
  /// holds (vLLM counts cached-only blocks as free too).
  double kv_cache_usage = 0;
  int64_t prefix_cache_queries = 0;  ///< prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     ///< of those, tokens found
  EngineStats stats;                 ///< the counters over the engine's life
  /// Requests held (waiting, running or swapped; not those still in the inbox), by request id,
  /// ascending.
  std::vector<RequestState> requests;
};

/// Requests -> steps -> outputs over one ModelRunner (which must outlive it). Its step() is
/// chapter 05's Task 2 (lio/engine_step.h) over the phases below.
class Engine : private EngineStepPhases {
 public:
  /// The runner's pool decides the block manager's size. `draft` (which must outlive the
  /// engine) is the draft model's runner for config.speculative.method == Draft, else unused.
  /// Throws InvalidArgument if `config` is invalid (speculation also needs reuse_kv), or as
  /// make_proposer().
  Engine(ModelRunner& runner, const Tokenizer& tokenizer, const EngineConfig& config = {},
         ModelRunner* draft = nullptr);

  /// Queues a request; thread-safe. Returns its id. With params.n > 1 the prompt is computed
  /// once and n samples fork off it, sharing its blocks (outputs carry sample_index). Throws
  /// InvalidArgument (and queues nothing) if the prompt is empty, has a token outside the
  /// vocabulary, leaves no room for one new token in the context ("prompt has N tokens; the
  /// context holds M"), needs more KV blocks than the whole pool holds (n samples: the shared
  /// prompt plus one block each), is longer than a step holds with chunked prefill off, or
  /// `params` are invalid.
  int64_t add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  /// Asks for request `id` (all its samples) to end (finish reason Abort) at the next step,
  /// its blocks freed; thread-safe. Unknown or finished ids are ignored.
  void abort_request(int64_t id);

  /// Runs one step: drains the inbox, schedules, runs the forward pass, samples, and returns one
  /// output per request that got tokens, finished or was aborted this step (chapter 05, Task 2:
  /// engine_step over this engine's phases). Throws what the runner throws (a device failure);
  /// the engine's queues stay consistent.
  std::vector<RequestOutput> step();

  /// True while any request is waiting, running or in the inbox.
  bool has_unfinished() const;
  /// The state after the last step, in one read (gauges, counters, the requests held). Call it
  /// from the thread that drives step().
  EngineSnapshot snapshot() const;
  /// Counters.
  const EngineStats& stats() const { return stats_; }
  /// The runner.
  ModelRunner& runner() { return runner_; }
  /// The decode CUDA graphs captured at construction (empty sizes with enforce_eager, on the
  /// CPU, or where the runner captures none).
  const GraphCapture& graph_capture() const { return graph_capture_; }
  /// Free KV blocks right now (all of them once every request is done and no radix tree holds
  /// cached blocks).
  int64_t n_free_blocks() const { return blocks_.n_free_blocks(); }
  /// The block manager (read-only: block tables, counts).
  const BlockManager& block_manager() const { return blocks_; }
  /// The prefix cache, or nullptr with PrefixCacheMode::None.
  const PrefixCache* prefix_cache() const { return prefix_cache_.get(); }
  /// Chapter 06's drafter, or nullptr without speculation (read-only: a test's view of the
  /// draft model's blocks).
  const Proposer* proposer() const { return spec_ ? &spec_->proposer() : nullptr; }
  /// Chapter 06's speculation (drafter, rounds, counters), or nullptr without it.
  const SpeculativeDecoder* speculative_decoder() const { return spec_.get(); }
  /// Sequences waiting or running, by sequence id (read-only; for the chapter executable's
  /// block-table views).
  const std::map<int64_t, std::unique_ptr<Sequence>>& live_sequences() const { return live_; }

 private:
  // The phases of a step (EngineStepPhases; their contracts are there).
  void drain_inbox(std::vector<RequestOutput>& out) override;
  void plan_lookahead() override;
  SchedulerOutput schedule(std::vector<RequestOutput>& out) override;
  void draft(SchedulerOutput& sched) override;
  void copy_blocks(const SchedulerOutput& sched) override;
  std::vector<SpecVerifyResult> run(const StepBatch& step) override;
  /// Structured outputs: each constrained sampling sequence's token mask for this step, into
  /// its sampler (Sampler::token_mask); with drafts, one mask per verified row as well
  /// (Sequence::spec_token_masks), the matcher advanced through the drafts and rolled back.
  /// EngineStats::n_grammar_masks counts every mask filled.
  void fill_token_masks(const StepBatch& step);
  void postprocess(const SchedulerOutput& sched, const StepBatch& step, std::span<const SpecVerifyResult> next,
                   std::vector<RequestOutput>& out) override;
  void record_schedule(const SchedulerOutput& sched) override;
  int64_t block_size() const override { return blocks_.block_size(); }
  Sampler& padding_sampler() override { return padding_sampler_; }

  RequestOutput output_of(const Sequence& seq) const;
  void finish(Sequence& seq, FinishReason reason, RequestOutput& out);
  void fork_samples(Sequence& parent);
  /// Makes what `seq` computed findable in the prefix cache, every KV cache group's blocks.
  void cache_insert(const Sequence& seq, bool finished);

  ModelRunner& runner_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  BlockManager blocks_;
  std::unique_ptr<PrefixCache> prefix_cache_;  ///< after blocks_: released before it
  std::vector<float> swap_host_;               ///< (swap blocks, block_floats) host K/V; before
                                               ///< swap_blocks_, whose initializer fills it
  std::unique_ptr<BlockManager> swap_blocks_;  ///< host swap-space block ids (Swap mode)
  /// Every KV cache group's table of a hybrid pool over blocks_ (one group: BlockManager's own).
  KvCacheCoordinator kv_groups_;
  Scheduler scheduler_;
  std::map<int64_t, std::unique_ptr<Sequence>> live_;  ///< waiting or running, by id
  EngineStats stats_;
  Sampler padding_sampler_{SamplerConfig{}};  ///< greedy; static batching's padding rows
  std::unique_ptr<SpeculativeDecoder> spec_;   ///< chapter 06; nullptr = no speculation (after kv_groups_)
  GraphCapture graph_capture_;  ///< the decode graphs captured at construction

  mutable std::mutex inbox_mutex_;
  std::vector<std::unique_ptr<Sequence>> inbox_add_;
  std::vector<int64_t> inbox_abort_;
  std::atomic<int64_t> next_id_{0};
};

}  // namespace lio
