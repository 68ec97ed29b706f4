// Chapter 05, Task 2 — reference solution: one engine step (contract: common/engine/include/lio/
// engine_step.h).
#include "lio/engine_step.h"

#include <span>

namespace lio {

namespace {

// The step's ForwardBatch: each scheduled sequence's next tokens at their positions through its
// blocks (prefill chunks and decode rows side by side), then the padding rows.
StepBatch build_step_batch(EngineStepPhases& e, const SchedulerOutput& sched) {
  StepBatch step{ForwardBatch(e.block_size()), {}, {}};
  const auto now = Sequence::Clock::now();
  for (const ScheduledSequence& s : sched.scheduled) {
    Sequence& seq = *s.seq;
    if (!seq.first_scheduled_time) seq.first_scheduled_time = now;
    if (!seq.spec_token_ids.empty()) {
      // Chapter 06: the last token and its k drafts, all k + 1 rows with logits.
      std::vector<int32_t> tokens{seq.token_ids().back()};
      tokens.insert(tokens.end(), seq.spec_token_ids.begin(), seq.spec_token_ids.end());
      const auto n_rows = static_cast<int64_t>(tokens.size());
      step.batch.add_sequence(tokens, seq.num_computed_tokens, seq.block_tables, n_rows, true);
      step.sampling.push_back(&seq);
      for (int64_t r = 0; r < n_rows; ++r) step.rows.push_back({&seq.sampler(), seq.token_ids(), seq.output_ids()});
      step.speculative = true;
      continue;
    }
    const std::span<const int32_t> tokens =
        std::span<const int32_t>(seq.token_ids()).subspan(static_cast<size_t>(seq.num_computed_tokens),
                                                          static_cast<size_t>(s.n_new_tokens));
    const bool completes = seq.num_computed_tokens + s.n_new_tokens == seq.n_tokens();
    step.batch.add_sequence(tokens, seq.num_computed_tokens, seq.block_tables, completes ? 1 : 0, true);
    if (completes) {
      step.sampling.push_back(&seq);
      step.rows.push_back({&seq.sampler(), seq.token_ids(), seq.output_ids()});
    }
  }
  // Static batching's finished rows (HF generate-style padding): a row each, no K/V written.
  for (const PaddingRow& row : sched.padding) {
    step.batch.add_sequence(std::span<const int32_t>(&row.token, 1), row.position, row.block_tables, 1, false);
    step.rows.push_back({&e.padding_sampler(), std::span<const int32_t>(&row.token, 1)});
  }
  return step;
}

}  // namespace

std::vector<RequestOutput> engine_step(EngineStepPhases& e) {
  std::vector<RequestOutput> outputs;
  e.drain_inbox(outputs);
  e.plan_lookahead();                             // chapter 06: room for drafts
  SchedulerOutput sched = e.schedule(outputs);    // which sequences, how many tokens each
  if (sched.scheduled.empty()) return outputs;
  e.copy_blocks(sched);                           // swap and copy-on-write before the pass
  e.draft(sched);                                 // chapter 06: the drafter proposes
  e.record_schedule(sched);
  const StepBatch step = build_step_batch(e, sched);
  const std::vector<SpecVerifyResult> next = e.run(step);  // forward pass + sampling / verification
  e.postprocess(sched, step, next, outputs);      // advance, append, stop checks, emit
  return outputs;
}

}  // namespace lio
