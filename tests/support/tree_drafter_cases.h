// tree_drafter_cases.h — the engine cases every tree drafter (Medusa, EAGLE; chapter 06, section
// 7; issue 63) must pass on tiny random-weight models, shared by test_medusa and test_eagle:
// greedy speculation gives plain greedy's tokens alone and in a batch with every KV block back
// in the pool, and keeps doing so under preemption (recompute and swap), the hash and radix
// prefix caches, and gemma3's hybrid pool. Header-only: the test support library does not link
// the engine.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "random_inputs.h"
#include "tiny_model.h"

namespace lio::testing {

/// Steps `engine` until every request finished: each request's new tokens by request id.
inline std::map<int64_t, std::vector<int32_t>> run_engine(Engine& engine) {
  std::map<int64_t, std::vector<int32_t>> out;
  for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard)
    for (const RequestOutput& o : engine.step())
      out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
  EXPECT_FALSE(engine.has_unfinished());
  return out;
}

/// max_tokens new tokens, EOS ignored; greedy, or sampled at `temperature` (top-k 20, seed 99).
inline SamplingParams tree_params(int64_t max_tokens, float temperature = 0.0f) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.sampler.temperature = temperature;
  if (temperature > 0) {
    p.sampler.top_k = 20;
    p.sampler.seed = 99;
  }
  return p;
}

/// Prompt i: 5 + 3 i random token ids (seeded by i).
inline std::vector<int32_t> tree_prompt(int i) {
  return random_token_ids(static_cast<size_t>(5 + 3 * i), static_cast<uint32_t>(40 + i));
}

/// A CPU runner over `model` with 4-token blocks.
inline std::unique_ptr<ModelRunner> tree_runner(const LoadedModel& model, int64_t n_blocks = 512, bool hybrid = false) {
  return std::make_unique<ModelRunner>(std::make_unique<CpuBackend>(model.config, model.weights),
                                       KvPoolConfig{4, n_blocks, KvCacheDType::F32, hybrid});
}

/// Six prompts of 40 greedy tokens through plain decoding, then through each of `configs` at one
/// sequence at a time and at all six: the same tokens, every block back in the pool, drafts made.
/// Returns (accepted drafts, K/V slot moves) summed over the runs: a caller checks that some
/// drafts were accepted off the tree's first chain, or the runs prove nothing about trees.
inline std::pair<int64_t, int64_t> expect_greedy_trees_equal_plain(const LoadedModel& model,
                                                                   const std::vector<SpeculativeConfig>& configs) {
  constexpr int kN = 6;
  const SamplingParams p = tree_params(40);
  EngineConfig plain_cfg;
  plain_cfg.scheduler.max_num_batched_tokens = 32;
  auto r0 = tree_runner(model);
  Engine plain(*r0, *model.tokenizer, plain_cfg);
  for (int i = 0; i < kN; ++i) plain.add_request(tree_prompt(i), p);
  const auto want = run_engine(plain);
  int64_t accepted = 0, moves = 0;
  for (const int64_t max_seqs : {1, kN}) {
    for (const SpeculativeConfig& spec : configs) {
      SCOPED_TRACE("max_num_seqs " + std::to_string(max_seqs) + ", " + std::to_string(spec.num_speculative_tokens) +
                   " nodes, top-k " + std::to_string(spec.method == SpecMethod::Eagle ? spec.eagle_top_k : spec.medusa_top_k));
      EngineConfig cfg = plain_cfg;
      cfg.scheduler.max_num_seqs = max_seqs;
      cfg.speculative = spec;
      auto r = tree_runner(model);
      Engine e(*r, *model.tokenizer, cfg);
      for (int i = 0; i < kN; ++i) e.add_request(tree_prompt(i), p);
      EXPECT_EQ(run_engine(e), want);
      EXPECT_EQ(e.n_free_blocks(), r->kv_pool().n_blocks());  // every tree's blocks back
      const SpecDecodeStats& s = e.speculative_decoder()->stats();
      EXPECT_GT(s.num_drafts, 0);
      accepted += s.num_accepted_tokens;
      moves += s.num_kv_slot_moves;
    }
  }
  return {accepted, moves};
}

/// The drafter's settings for a model written from `spec` and loaded as `model`; `tag` names the
/// model ("llama" or "gemma3") for the drafter file the callback writes.
using TreeDrafterConfig =
    std::function<SpeculativeConfig(const TinyModelSpec& spec, const LoadedModel& model, const std::string& tag)>;

/// A pool too small for the batch (preemption by recompute or by swap), the hash or radix prefix
/// cache over prompts sharing a prefix, and a gemma3 model whose windowed layers keep their own
/// KV cache group: greedy speculation with `config`'s drafter gives each configuration's plain
/// tokens and ends with no block held but by the prefix cache (and the hybrid pool's null
/// block). `llama_spec` / `llama` is the test's model; the gemma3 model is written to `dir`.
inline void expect_trees_survive_preemption_caches_and_hybrid(const TinyModelSpec& llama_spec, const LoadedModel& llama,
                                                              const std::string& dir, const TreeDrafterConfig& config) {
  TinyModelSpec gemma = llama_spec;
  gemma.architecture = "gemma3";
  gemma.n_layers = 6;  // five windowed layers, then a global one: a hybrid pool
  gemma.sliding_window = 8;
  write_tiny_gguf(dir + "/tree_cases_gemma3.gguf", gemma);
  const LoadedModel g = load_model(dir + "/tree_cases_gemma3.gguf", WeightMode::AsStored);
  struct Case {
    const char* name;
    const LoadedModel* model;
    SpeculativeConfig spec;
    bool hybrid;
    int64_t n_blocks;  ///< tight: some sequence must be preempted
    PreemptionMode preemption;
    PrefixCacheMode cache;
  };
  const SpeculativeConfig llama_cfg = config(llama_spec, llama, "llama");
  const Case cases[] = {
      {"llama, recompute, hash cache", &llama, llama_cfg, false, 36, PreemptionMode::Recompute, PrefixCacheMode::Hash},
      {"llama, swap, radix cache", &llama, llama_cfg, false, 36, PreemptionMode::Swap, PrefixCacheMode::Radix},
      {"gemma3 hybrid pool, recompute, hash cache", &g, config(gemma, g, "gemma3"), true, 60, PreemptionMode::Recompute,
       PrefixCacheMode::Hash},
  };
  const std::vector<int32_t> shared = random_token_ids(13, 7);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto serve = [&](bool speculate, EngineStats& stats, int64_t& held) {
      auto r = tree_runner(*c.model, c.n_blocks, c.hybrid);
      EngineConfig cfg;
      cfg.scheduler.max_num_batched_tokens = 32;
      cfg.scheduler.preemption = c.preemption;
      cfg.swap_space_mib = 4;
      cfg.prefix_cache = c.cache;
      if (speculate) cfg.speculative = c.spec;
      EXPECT_EQ(r->kv_pool().n_groups() > 1, c.hybrid);
      Engine e(*r, *c.model->tokenizer, cfg);
      std::map<int64_t, std::vector<int32_t>> out;
      for (int wave = 0; wave < 3; ++wave) {
        for (int i = 0; i < 5; ++i) {
          std::vector<int32_t> p = shared;
          const std::vector<int32_t> own = tree_prompt(i + wave);
          p.insert(p.end(), own.begin(), own.end());
          e.add_request(p, tree_params(36));
        }
        auto o = run_engine(e);
        out.insert(o.begin(), o.end());
      }
      stats = e.stats();
      const EngineSnapshot snap = e.snapshot();
      held = snap.n_used_blocks - snap.n_evictable_blocks;  // blocks some sequence still holds
      return out;
    };
    EngineStats plain_stats, spec_stats;
    int64_t plain_held = -1, spec_held = -1;
    const auto want = serve(false, plain_stats, plain_held);
    EXPECT_EQ(serve(true, spec_stats, spec_held), want);
    EXPECT_LE(plain_held, c.hybrid ? 1 : 0);  // held by no sequence: none, or the hybrid pool's null block
    EXPECT_EQ(spec_held, plain_held) << "a tree's block leaked";
    EXPECT_GT(spec_stats.n_preemptions, 0) << "the pool was meant to run out";
    EXPECT_GT(spec_stats.spec_num_drafts, 50);
    EXPECT_GT(spec_stats.spec_num_accepted_tokens, 0);
  }
}

}  // namespace lio::testing
