#include "lio/engine.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "lio/error.h"

namespace lio {
namespace {
double ms_between(Sequence::Clock::time_point a, Sequence::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
/// The host swap space of Swap preemption: swap_space_mib of host blocks as big as the pool's
/// (`host` is sized to match); nullptr in Recompute mode or with no room for one block.
std::unique_ptr<BlockManager> make_swap_space(const EngineConfig& config, const KvPool& pool, std::vector<float>& host) {
  if (config.scheduler.preemption != PreemptionMode::Swap) return nullptr;
  if (config.swap_space_mib < 0) throw InvalidArgument("--swap-space-mib must be >= 0");
  const int64_t n = (config.swap_space_mib << 20) / (pool.block_floats() * static_cast<int64_t>(sizeof(float)));
  if (n < 1) return nullptr;
  host.assign(static_cast<size_t>(n * pool.block_floats()), 0.0f);
  return std::make_unique<BlockManager>(n, pool.block_size());
}

/// The sliding window of each KV cache group of the runner's pool (0 = full attention).
std::vector<int64_t> group_windows(const KvPool& pool) { return pool.groups().window; }

}  // namespace

Engine::Engine(ModelRunner& runner, const Tokenizer& tokenizer, const EngineConfig& config, ModelRunner* draft)
    : runner_(runner),
      tokenizer_(tokenizer),
      config_(config),
      blocks_(runner.kv_pool().n_blocks(), runner.kv_pool().block_size()),
      prefix_cache_(make_prefix_cache(config.prefix_cache, blocks_)),
      swap_blocks_(make_swap_space(config, runner.kv_pool(), swap_host_)),
      kv_groups_(blocks_, group_windows(runner.kv_pool())),
      scheduler_(config.scheduler, blocks_, prefix_cache_.get(), swap_blocks_.get(), &kv_groups_),
      spec_(config.speculative.method == SpecMethod::None
                ? nullptr
                : std::make_unique<SpeculativeDecoder>(config.speculative, runner, draft, kv_groups_)) {
  if (spec_ && !config.reuse_kv) {
    throw InvalidArgument("speculative decoding needs the KV cache (it verifies drafts against cached K/V)");
  }
  // Every per-step buffer sized now, from the scheduler's limits, so a step allocates nothing
  // and never waits for the device to grow one (the CUDA backend; the CPU's are host vectors).
  const SchedulerConfig& sc = config.scheduler;
  const KvPool& pool = runner.kv_pool();
  const int64_t rows_per_seq = spec_ ? spec_->rows_per_sequence() : 1;
  StepLimits limits;
  limits.max_tokens = sc.max_num_batched_tokens;
  limits.max_seqs = sc.max_num_seqs;
  limits.max_logits_rows = std::min(sc.max_num_seqs * rows_per_seq, sc.max_num_batched_tokens);
  limits.max_blocks_per_seq =
      std::min(pool.n_blocks(), (runner.config().context_length + pool.block_size() - 1) / pool.block_size());
  limits.kv_cache_groups = pool.n_groups();
  runner.reserve(limits);  // drops graphs an earlier engine captured on this runner
  // Issue 45: the decode steps as CUDA graphs, one per bucket of sequences (nothing on the CPU).
  if (!config.enforce_eager) graph_capture_ = runner.capture_decode_graphs(sc.max_num_seqs);
}

int64_t Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  const ModelConfig& c = runner_.config();
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) throw InvalidArgument("the prompt is empty (0 tokens)");
  if (n_prompt >= c.context_length) {
    throw InvalidArgument("prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                          std::to_string(c.context_length) + " (leave room for at least one new token)");
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size) {
      throw InvalidArgument("prompt token " + std::to_string(prompt[i]) + " at index " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  params.validate();
  const SchedulerConfig& sc = config_.scheduler;
  if (!sc.enable_chunked_prefill && n_prompt > sc.max_num_batched_tokens) {
    throw InvalidArgument("prompt has " + std::to_string(n_prompt) + " tokens; with chunked prefill off one step holds " +
                          std::to_string(sc.max_num_batched_tokens) + " (raise --max-num-batched-tokens)");
  }
  // Blocks the prompt needs at least: every group's, a windowed group's up to its window.
  const int64_t need = kv_groups_.peak_blocks(n_prompt + 1) + (params.n - 1);
  if (need > blocks_.n_blocks()) {
    throw InvalidArgument("prompt has " + std::to_string(n_prompt) + " tokens" +
                          (params.n > 1 ? " and n = " + std::to_string(params.n) + " samples" : std::string()) +
                          "; the KV pool holds only " + std::to_string(blocks_.n_blocks() * blocks_.block_size()) +
                          " tokens in all (raise --kv-cache-mib)");
  }
  const int64_t id = next_id_++;
  auto seq = std::make_unique<Sequence>(id, std::move(prompt), params, tokenizer_);
  seq->forks_pending = params.n - 1;
  std::lock_guard lock(inbox_mutex_);
  inbox_add_.push_back(std::move(seq));
  return id;
}

void Engine::abort_request(int64_t id) {
  std::lock_guard lock(inbox_mutex_);
  inbox_abort_.push_back(id);
}

bool Engine::has_unfinished() const {
  std::lock_guard lock(inbox_mutex_);
  return !inbox_add_.empty() || !live_.empty();
}

RequestOutput Engine::output_of(const Sequence& seq) const {
  RequestOutput o;
  o.request_id = seq.request_id;
  o.sample_index = seq.sample_index;
  o.n_prompt_tokens = seq.n_prompt_tokens();
  o.n_generated_tokens = seq.n_generated();
  o.n_preemptions = seq.n_preemptions;
  o.kv_tokens = seq.num_computed_tokens;
  o.n_spec_drafts = seq.n_spec_drafts;
  o.n_spec_draft_tokens = seq.n_spec_draft_tokens;
  o.n_spec_accepted_tokens = seq.n_spec_accepted_tokens;
  o.n_spec_rejections = seq.n_spec_rejections;
  if (seq.first_scheduled_time) o.queue_ms = ms_between(seq.arrival_time, *seq.first_scheduled_time);
  if (seq.first_token_time) o.ttft_ms = ms_between(seq.arrival_time, *seq.first_token_time);
  return o;
}

void Engine::finish(Sequence& seq, FinishReason reason, RequestOutput& out) {
  out.new_text += seq.finish(reason);
  out.finished = true;
  out.finish_reason = seq.finish_reason;
  const auto now = Sequence::Clock::now();
  out.e2e_ms = ms_between(seq.arrival_time, now);
  out.n_generated_tokens = seq.n_generated();
  if (seq.first_token_time && seq.n_generated() > 1) {
    out.tpot_ms = ms_between(*seq.first_token_time, seq.last_token_time) / static_cast<double>(seq.n_generated() - 1);
  }
  for (size_t i = 1; i < seq.token_times.size(); ++i)
    out.itl_ms.push_back(ms_between(seq.token_times[i - 1], seq.token_times[i]));
  for (const auto& t : seq.token_times) out.token_times_ms.push_back(ms_between(seq.arrival_time, t));
  out.kv_blocks = kv_groups_.n_blocks_held(seq.block_tables);  // every group's, the null block not counted
  if (prefix_cache_ && seq.holds_blocks()) cache_insert(seq, true);  // what it computed stays findable
  scheduler_.remove(&seq);  // frees its blocks at once (cached content kept until reused)
  if (spec_) spec_->release(seq);
}

void Engine::cache_insert(const Sequence& seq, bool finished) {
  if (!seq.holds_blocks()) return;
  prefix_cache_->insert(seq.token_ids(), seq.num_computed_tokens, seq.block_tables, kv_groups_, finished);
}

void Engine::fork_samples(Sequence& parent) {
  // The prompt is computed: samples 1 .. n-1 share its blocks up to the last prompt token,
  // which each computes itself (its logits row; the write copies the shared last block).
  const int64_t n_prompt = parent.n_prompt_tokens();
  const std::vector<int32_t> prompt(parent.token_ids().begin(), parent.token_ids().begin() + n_prompt);
  for (int64_t i = parent.forks_pending; i >= 1; --i) {  // pushed to the front: sample 1 ends up first
    SamplingParams p = parent.params();
    p.n = 1;
    p.sampler.seed += static_cast<uint64_t>(i);
    auto child = std::make_unique<Sequence>(next_id_++, prompt, p, tokenizer_);
    child->request_id = parent.request_id;
    child->sample_index = i;
    child->arrival_time = parent.arrival_time;
    child->block_tables = kv_groups_.fork(parent.block_tables, n_prompt - 1);
    child->num_computed_tokens = n_prompt - 1;
    scheduler_.add_front(child.get());
    live_.emplace(child->id(), std::move(child));
    stats_.n_forks += 1;
  }
  parent.forks_pending = 0;
}

void Engine::drain_inbox(std::vector<RequestOutput>& out) {
  std::vector<std::unique_ptr<Sequence>> added;
  std::vector<int64_t> aborted;
  {
    std::lock_guard lock(inbox_mutex_);
    added.swap(inbox_add_);
    aborted.swap(inbox_abort_);
  }
  for (auto& seq : added) {
    scheduler_.add(seq.get());
    live_.emplace(seq->id(), std::move(seq));
  }
  for (const int64_t id : aborted) {
    for (auto it = live_.begin(); it != live_.end();) {  // every sample of the request
      if (it->second->request_id != id) {
        ++it;
        continue;
      }
      RequestOutput o = output_of(*it->second);
      finish(*it->second, FinishReason::Abort, o);
      out.push_back(std::move(o));
      it = live_.erase(it);
    }
  }
}

// ---- one step: schedule, run, postprocess (nano-vllm's LLMEngine.step) ----------------------

std::vector<RequestOutput> Engine::step() {
  return engine_step(*this);  // chapter 05, Task 2
}

void Engine::plan_lookahead() {
  if (spec_) spec_->plan_lookahead(live_);
}

void Engine::draft(SchedulerOutput& sched) {
  if (spec_) spec_->draft(sched, live_);
}

SchedulerOutput Engine::schedule(std::vector<RequestOutput>& out) {
  SchedulerOutput sched = scheduler_.schedule();
  for (Sequence* seq : sched.unfittable) {  // the pool can never hold it: end it, never hang
    RequestOutput o = output_of(*seq);
    finish(*seq, FinishReason::Length, o);
    out.push_back(std::move(o));
    live_.erase(seq->id());
  }
  sched.unfittable.clear();  // erased above: no dangling pointers past this point
  if (spec_) {
    for (Sequence* seq : sched.preempted) spec_->on_preempted(*seq);
  }
  return sched;
}

void Engine::copy_blocks(const SchedulerOutput& sched) {
  // In the scheduler's order: swap-outs read device blocks the step may reuse, swap-ins then
  // fill theirs, copy-on-write last.
  runner_.swap_out(sched.swap_out, swap_host_.data());
  runner_.swap_in(sched.swap_in, swap_host_.data());
  runner_.copy_blocks(sched.copies);
}

std::vector<SpecVerifyResult> Engine::run(const StepBatch& step) {
  std::vector<SpecVerifyResult> results;
  if (step.rows.empty()) {  // every row is a prefill chunk short of its prompt's end
    runner_.forward(step.batch);
    return results;
  }
  fill_token_masks(step);
  if (spec_) return spec_->run(step);  // chapter 06: the pass, then each round's verification
  for (const int32_t t : runner_.forward_sample(step.batch, step.rows)) results.push_back({{t}, 0});
  return results;
}

void Engine::fill_token_masks(const StepBatch& step) {
  const int64_t vocab = runner_.config().vocab_size;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (Sequence* seq : step.sampling) {
    GrammarMatcher* g = seq->grammar();
    if (!g) continue;
    const auto fill = [&](std::span<uint32_t> mask) {
      if (g->fill_next_token_mask(mask) == 0 && tokenizer_.eos_id() >= 0) {
        // A terminated grammar allows nothing; the sequence ends at the EOS it already took, so
        // this is only reachable past a bug: end it at EOS rather than fail the whole step.
        const auto eos = static_cast<uint32_t>(tokenizer_.eos_id());
        mask[eos / 32] |= uint32_t{1} << (eos % 32);
      }
      ++n;
    };
    const std::span<uint32_t> mask = seq->sampler().token_mask(vocab);
    fill(mask);
    const std::vector<int32_t>& drafts = seq->spec_token_ids;
    seq->spec_token_masks.clear();
    if (drafts.empty()) continue;
    // Speculation: verified row i obeys the matcher advanced through drafts 0 .. i - 1 (which
    // the decoder cut to what the grammar allows), then the matcher goes back where it was.
    const size_t words = mask.size();
    seq->spec_token_masks.resize((drafts.size() + 1) * words);
    std::copy(mask.begin(), mask.end(), seq->spec_token_masks.begin());
    for (size_t i = 0; i < drafts.size(); ++i) {
      const bool allowed = g->accept_token(drafts[i]);
      LIO_CHECK(allowed, "fill_token_masks: a draft the grammar refuses reached verification");
      fill(std::span<uint32_t>(seq->spec_token_masks).subspan((i + 1) * words, words));
    }
    g->rollback(static_cast<int64_t>(drafts.size()));
  }
  if (n == 0) return;
  stats_.n_grammar_masks += n;
  stats_.grammar_mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Engine::postprocess(const SchedulerOutput& sched, const StepBatch& step, std::span<const SpecVerifyResult> next,
                         std::vector<RequestOutput>& out) {
  for (const ScheduledSequence& s : sched.scheduled) {
    Sequence& seq = *s.seq;
    if (!seq.spec_token_ids.empty()) continue;  // advanced below, by what was accepted
    seq.num_computed_tokens += s.n_new_tokens;
    if (seq.forks_pending > 0 && seq.num_computed_tokens >= seq.n_prompt_tokens()) fork_samples(seq);
    if (prefix_cache_) cache_insert(seq, false);
    if (!config_.reuse_kv) seq.num_computed_tokens = 0;  // chapter 01's baseline: recompute
  }
  const int64_t context_length = runner_.config().context_length;
  for (size_t i = 0; i < step.sampling.size(); ++i) {
    Sequence& seq = *step.sampling[i];
    RequestOutput o = output_of(seq);
    for (const int32_t token : next[i].tokens) {  // one token, or accepted drafts + one
      const int64_t before = seq.n_tokens();
      o.new_text += seq.append_token(token, context_length);
      if (seq.n_tokens() > before) {
        o.new_token_ids.push_back(token);
        if (seq.params().sampler.logprobs >= 0) o.logprobs.push_back(seq.sampler().last_logprobs());
      }
      if (seq.finish_reason) break;
    }
    if (!seq.spec_token_ids.empty()) {
      // Chapter 06: the round's bookkeeping (the cache cut back past a stop, the counters, the
      // drafter's rollback); the prefix cache sees the verified length only.
      spec_->finish_round(seq, next[i], o);
      if (prefix_cache_) cache_insert(seq, false);
      stats_.spec_num_drafts = spec_->stats().num_drafts;
      stats_.spec_num_draft_tokens = spec_->stats().num_draft_tokens;
      stats_.spec_num_accepted_tokens = spec_->stats().num_accepted_tokens;
      stats_.spec_accepted_per_position = spec_->stats().accepted_per_position;
    }
    o.n_generated_tokens = seq.n_generated();
    if (seq.first_token_time) o.ttft_ms = ms_between(seq.arrival_time, *seq.first_token_time);
    if (seq.finish_reason) {
      o.kv_tokens = seq.num_computed_tokens;
      finish(seq, *seq.finish_reason, o);
      out.push_back(std::move(o));
      live_.erase(seq.id());
      continue;
    }
    out.push_back(std::move(o));
  }
}

// ---- statistics and the snapshot ---------------------------------------------------------------

void Engine::record_schedule(const SchedulerOutput& sched) {
  stats_.n_preemptions += static_cast<int64_t>(sched.preempted.size());
  if (sched.scheduled.empty()) return;
  stats_.n_steps += 1;
  stats_.n_block_copies += static_cast<int64_t>(sched.copies.size());
  stats_.n_blocks_swapped_out += static_cast<int64_t>(sched.swap_out.size());
  stats_.n_blocks_swapped_in += static_cast<int64_t>(sched.swap_in.size());
  stats_.n_padding_tokens += static_cast<int64_t>(sched.padding.size());
  stats_.max_running = std::max<int64_t>(stats_.max_running, static_cast<int64_t>(sched.scheduled.size()));
  stats_.peak_blocks_used = std::max(stats_.peak_blocks_used, blocks_.n_used_blocks());
  int64_t tokens_held = 0;
  for (const ScheduledSequence& s : sched.scheduled) {
    const Sequence& seq = *s.seq;
    tokens_held += seq.num_computed_tokens + s.n_new_tokens;
    if (seq.num_computed_tokens < seq.n_prompt_tokens() || seq.n_tokens() - seq.num_computed_tokens > 1) {
      stats_.n_prompt_tokens_computed += s.n_new_tokens;
    } else {
      stats_.n_decode_tokens += s.n_new_tokens;
    }
  }
  stats_.peak_tokens_held = std::max(stats_.peak_tokens_held, tokens_held);
}

EngineSnapshot Engine::snapshot() const {
  EngineSnapshot s;
  std::map<int64_t, bool> scheduled;  // request id -> any of its sequences has run
  for (const auto& [id, seq] : live_) {
    if (seq->status == SequenceStatus::Running) s.n_running += 1;
    if (seq->status == SequenceStatus::Waiting) s.n_waiting += 1;
    if (seq->status == SequenceStatus::Swapped) s.n_swapped += 1;
    scheduled[seq->request_id] |= seq->first_scheduled_time.has_value();
  }
  for (const auto& [request_id, ran] : scheduled) s.requests.push_back({request_id, ran});
  s.n_blocks = blocks_.n_blocks();
  s.n_used_blocks = blocks_.n_used_blocks();
  s.n_evictable_blocks = prefix_cache_ ? prefix_cache_->n_evictable() : 0;
  s.kv_cache_usage = static_cast<double>(std::max<int64_t>(0, s.n_used_blocks - s.n_evictable_blocks)) /
                     static_cast<double>(s.n_blocks);
  if (prefix_cache_) {
    s.prefix_cache_queries = prefix_cache_->stats.queries;
    s.prefix_cache_hits = prefix_cache_->stats.hits;
  }
  s.stats = stats_;
  return s;
}

}  // namespace lio
