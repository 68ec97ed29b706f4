// engine_step.h — chapter 05, Task 2: one iteration of the engine (Orca's iteration-level
// scheduling, Yu et al. 2022; nano-vllm's LLMEngine.step): the phases the engine gives, and the
// step the learner writes over them, the batch that mixes prefill chunks and decode rows included.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lio/forward_batch.h"
#include "lio/model_runner.h"
#include "lio/scheduler.h"
#include "lio/sequence.h"
#include "lio/spec_decode.h"

namespace lio {

/// What one request got in one step.
struct RequestOutput {
  int64_t request_id = 0;              ///< add_request()'s id
  int64_t sample_index = 0;            ///< which of the request's n samples (0 .. n-1)
  std::vector<int32_t> new_token_ids;  ///< tokens sampled this step (EOS excluded)
  std::string new_text;                ///< text that became final this step
  bool finished = false;               ///< true on the request's last output
  std::optional<FinishReason> finish_reason;  ///< set when finished
  int64_t n_prompt_tokens = 0;         ///< tokens in the prompt
  int64_t n_generated_tokens = 0;      ///< so far
  double queue_ms = 0;                 ///< arrival -> first step that ran it (once known)
  double ttft_ms = 0;                  ///< arrival -> first token (once known)
  double tpot_ms = 0;                  ///< mean time per token after the first (when finished)
  double e2e_ms = 0;                   ///< arrival -> finish (when finished)
  /// Inter-token latencies, ms: the gaps between consecutive sampled tokens (when finished;
  /// n_generated - 1 of them, one more if it stopped at EOS). TPOT is their mean.
  std::vector<double> itl_ms;
  /// Arrival -> each sampled token (EOS included), ms (when finished): the timestamps the
  /// server's metrics derive TTFT, TPOT and ITL from (chapter 09, Task 2).
  std::vector<double> token_times_ms;
  int64_t n_preemptions = 0;           ///< times this request was preempted
  int64_t kv_tokens = 0;               ///< positions it held in the pool at its last step
  /// KV blocks it held when it finished, every KV cache group's (a sliding-window group's blocks
  /// that slid out of the window, and the null block standing in for them, not counted); 0 before.
  int64_t kv_blocks = 0;
  /// With params.sampler.logprobs >= 0: one entry per new_token_ids entry, in order.
  std::vector<SampleLogprobs> logprobs;
  /// Speculative decoding (chapter 06), this sample so far: verification rounds with drafts,
  /// drafted tokens, and accepted drafts (acceptance rate = accepted / drafted).
  int64_t n_spec_drafts = 0;
  int64_t n_spec_draft_tokens = 0;     ///< see n_spec_drafts
  int64_t n_spec_accepted_tokens = 0;  ///< see n_spec_drafts
  int64_t n_spec_rejections = 0;       ///< rounds that ended at a rejected draft
};

/// One step's forward batch and who samples from it.
struct StepBatch {
  ForwardBatch batch;               ///< every row the step runs
  std::vector<Sequence*> sampling;  ///< sequences that get a result from this pass, in logits-row order
  /// One per logits row of `batch`, in row order: the sampler and token history that row is
  /// sampled with.
  std::vector<SampleRow> rows;
  bool speculative = false;  ///< some sampling sequence verifies drafts (1 + k logits rows)
};

/// What the engine gives a step (lio::Engine implements it). Each phase is one of the chapters'
/// pieces; the step decides their order and builds the batch between them. Not thread-safe.
class EngineStepPhases {
 public:
  virtual ~EngineStepPhases() = default;

  /// Requests queued by add_request since the last step join the scheduler's waiting queue;
  /// requests aborted since then end now, one output each appended to `out`.
  virtual void drain_inbox(std::vector<RequestOutput>& out) = 0;
  /// Chapter 06: marks how many lookahead slots (drafts) each running sequence may be scheduled
  /// with this step; does nothing without speculation.
  virtual void plan_lookahead() = 0;
  /// Chapter 05, Task 1's scheduling step over the engine's queues. Sequences the pool can never
  /// hold end here, one output each appended to `out`. An empty `scheduled` means nothing runs.
  virtual SchedulerOutput schedule(std::vector<RequestOutput>& out) = 0;
  /// Makes the block copies `sched` asks for on the device (swap-outs, swap-ins,
  /// copy-on-write), which the forward pass then reads and writes over.
  virtual void copy_blocks(const SchedulerOutput& sched) = 0;
  /// Chapter 06: the drafter proposes each scheduled decoding sequence's drafts
  /// (Sequence::spec_token_ids) and corrects its n_new_tokens to 1 + the drafts it got; does
  /// nothing without speculation.
  virtual void draft(SchedulerOutput& sched) = 0;
  /// Counts the step's shape for the engine's statistics (rows, prefill and decode tokens).
  virtual void record_schedule(const SchedulerOutput& sched) = 0;
  /// The forward pass over step.batch, then each sampling sequence's result from its logits
  /// rows: one sampled token, or chapter 06's round over its drafts (Task 5: verification, then
  /// the KV cache rolled back to what stays valid). Returns one result per step.sampling entry,
  /// in order. Throws what the runner throws.
  virtual std::vector<SpecVerifyResult> run(const StepBatch& step) = 0;
  /// Advances every scheduled sequence by what it computed, appends the results' tokens, checks
  /// stop conditions (a stop inside accepted drafts cuts the computed count back to it) and
  /// appends one output per request that got tokens or finished to `out`. `next` is run()'s
  /// result for `step`.
  virtual void postprocess(const SchedulerOutput& sched, const StepBatch& step, std::span<const SpecVerifyResult> next,
                           std::vector<RequestOutput>& out) = 0;
  /// Tokens per KV block (the ForwardBatch's block size).
  virtual int64_t block_size() const = 0;
  /// The greedy sampler static batching's padding rows are sampled with (their tokens are
  /// discarded).
  virtual Sampler& padding_sampler() = 0;
};

/// Chapter 05, Task 2 (lesson docs/05_continuous_batching.md, "One engine step" and "Task 2"):
/// one step of the engine over `e`'s phases, the body of Engine::step. Returns the step's outputs:
/// those the inbox, the schedule and the post-processing produced, in that order.
///
/// The batch the step runs (StepBatch) holds, for each scheduled sequence in `scheduled`'s order,
/// its n_new_tokens next tokens from position num_computed_tokens on, through its block tables;
/// a sequence with drafts runs its last token and its drafts instead, every one of those rows
/// with logits; any other sequence gets one logits row exactly when its chunk ends on its last
/// token. Then static batching's padding rows, one logits row each and no K/V written. `sampling`
/// and `rows` follow the logits rows: one SampleRow per logits row with the sequence's sampler
/// and history, one `sampling` entry per sequence that has logits rows.
/// Must hold: the copies `sched` asks for are made before the pass; drafts are proposed after
/// scheduling and before the batch is built; lookahead is planned before scheduling; nothing
/// runs when nothing is scheduled; every phase runs at most once.
/// Throws what the phases throw (the engine's queues stay consistent).
std::vector<RequestOutput> engine_step(EngineStepPhases& e);

}  // namespace lio
