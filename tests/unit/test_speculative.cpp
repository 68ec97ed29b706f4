// Speculative decoding in the batched engine (chapter 06) on tiny random-weight models:
// greedy speculation gives plain greedy's tokens for every drafter, alone and mixed with other
// requests' prefill chunks; rollback gives back exactly the rejected slots (no block leaks after
// more than a thousand verification rounds with preemption and prefix caching); the sampled
// output is distributed as the target's own sampling (chi-square, stated false-alarm rate);
// bad settings are refused before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lio/cli_parse.h"
#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/speculative.h"
#include "sanitizer.h"
#include "tiny_model.h"

namespace {
using lio::testing::TinyModelSpec;

/// 4 layers so that early exit has L in 1..3; Q4_1 weights like the real model.
TinyModelSpec spec_with(uint64_t seed, float init_std) {
  TinyModelSpec s;
  s.n_layers = 4;
  s.weight_dtype = lio::DType::Q4_1;
  s.embd_dtype = lio::DType::Q8_0;
  s.context_length = 512;
  s.seed = seed;
  s.init_std = init_std;
  return s;
}

class SpeculativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = load("target.gguf", spec_with(1, 0.2f));
    same_ = load("same.gguf", spec_with(1, 0.2f));     // the target itself: every draft accepted
    near_ = load("near.gguf", spec_with(1, 0.23f));    // a perturbed copy: some drafts rejected
    bad_ = load("bad.gguf", spec_with(7, 0.2f));       // unrelated weights: most rejected
  }
  std::unique_ptr<lio::LoadedModel> load(const std::string& name, const TinyModelSpec& spec) const {
    lio::testing::write_tiny_gguf(dir_ + "/" + name, spec);
    return std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/" + name, lio::WeightMode::AsStored));
  }
  static std::unique_ptr<lio::ModelRunner> runner(const lio::LoadedModel& m, int64_t block_size, int64_t n_blocks) {
    return std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(m.config, m.weights),
                                              lio::KvPoolConfig{block_size, n_blocks});
  }
  /// Prompt `i`: a random head, then a phrase repeated (so n-gram lookup finds matches).
  static std::vector<int32_t> prompt(int i) {
    std::mt19937 rng(300 + i);
    std::uniform_int_distribution<int32_t> id(3, 250);
    std::vector<int32_t> p(static_cast<size_t>(4 + 5 * i));
    for (int32_t& t : p) t = id(rng);
    std::vector<int32_t> phrase(6);
    for (int32_t& t : phrase) t = id(rng);
    for (int r = 0; r < 3; ++r) p.insert(p.end(), phrase.begin(), phrase.end());
    return p;
  }
  /// `p` after every token id of the vocabulary once, in a shuffled order: whatever the model
  /// generates has occurred before, so n-gram lookup with n_min = 1 always finds a match.
  std::vector<int32_t> after_whole_vocab(const std::vector<int32_t>& p) const {
    std::vector<int32_t> all;
    for (int32_t t = 3; t < static_cast<int32_t>(target_->config.vocab_size); ++t) all.push_back(t);
    std::shuffle(all.begin(), all.end(), std::mt19937(5));
    all.insert(all.end(), p.begin(), p.end());
    return all;
  }
  static lio::SamplingParams greedy(int64_t max_tokens) {
    lio::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
  }
  /// Every request's generated ids, by request id.
  static std::map<int64_t, std::vector<int32_t>> run_all(lio::Engine& engine) {
    std::map<int64_t, std::vector<int32_t>> out;
    for (int guard = 0; engine.has_unfinished(); ++guard) {
      if (guard > 200000) {
        ADD_FAILURE() << "engine did not finish";
        break;
      }
      for (const lio::RequestOutput& o : engine.step())
        out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
    return out;
  }
  lio::SpeculativeConfig config(lio::SpecMethod method, int64_t k) const {
    lio::SpeculativeConfig c;
    c.method = method;
    c.num_speculative_tokens = k;
    c.draft_layers = 2;
    c.ngram_min = 2;
    c.ngram_max = 4;
    return c;
  }

  std::string dir_ = lio::testing::make_temp_dir("lio_test_speculative");
  std::unique_ptr<lio::LoadedModel> target_, same_, near_, bad_;
};

struct Drafter {
  const char* name;
  lio::SpecMethod method;
  int which_draft;  // 0 none, 1 same, 2 near, 3 bad
};

TEST_F(SpeculativeTest, GreedySpeculationGivesPlainGreedyTokensForEveryDrafter) {
  constexpr int kN = 8;
  constexpr int64_t kGen = 20;
  constexpr int64_t kBlocks = 1024;
  // n-gram lookup gets prompts that hold every token id, so that it always has drafts.
  auto prompt_for = [&](lio::SpecMethod m, int i) { return m == lio::SpecMethod::Ngram ? after_whole_vocab(prompt(i)) : prompt(i); };
  lio::EngineConfig plain_cfg;
  plain_cfg.scheduler.max_num_batched_tokens = 24;  // prompts arrive in chunks beside decode rows
  auto plain_run = [&](lio::SpecMethod m) {
    auto r = runner(*target_, 4, kBlocks);
    lio::Engine plain(*r, *target_->tokenizer, plain_cfg);
    for (int i = 0; i < kN; ++i) plain.add_request(prompt_for(m, i), greedy(kGen));
    return run_all(plain);
  };
  const auto want_short = plain_run(lio::SpecMethod::Draft);
  const auto want_long = plain_run(lio::SpecMethod::Ngram);

  const Drafter drafters[] = {{"draft (same weights)", lio::SpecMethod::Draft, 1},
                              {"draft (perturbed)", lio::SpecMethod::Draft, 2},
                              {"draft (unrelated)", lio::SpecMethod::Draft, 3},
                              {"ngram", lio::SpecMethod::Ngram, 0},
                              {"early exit L=2", lio::SpecMethod::EarlyExit, 0}};
  for (const Drafter& d : drafters) {
    for (const int64_t k : {1, 3, 5}) {
      SCOPED_TRACE(std::string(d.name) + ", k = " + std::to_string(k));
      const lio::LoadedModel* draft_model = d.which_draft == 1 ? same_.get() : d.which_draft == 2 ? near_.get()
                                            : d.which_draft == 3 ? bad_.get() : nullptr;
      auto r = runner(*target_, 4, kBlocks);
      auto dr = draft_model ? runner(*draft_model, 4, kBlocks) : nullptr;
      lio::EngineConfig cfg = plain_cfg;
      cfg.speculative = config(d.method, k);
      cfg.speculative.ngram_min = 1;
      lio::Engine e(*r, *target_->tokenizer, cfg, dr.get());
      for (int i = 0; i < kN; ++i) e.add_request(prompt_for(d.method, i), greedy(kGen));
      const auto got = run_all(e);
      const auto& want = d.method == lio::SpecMethod::Ngram ? want_long : want_short;
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [id, ids] : want) {
        ASSERT_EQ(static_cast<int64_t>(got.at(id).size()), kGen) << "request " << id;
        EXPECT_EQ(got.at(id), ids) << "request " << id;
      }
      const lio::EngineStats& st = e.stats();
      EXPECT_GT(st.spec_num_draft_tokens, 0) << "nothing was drafted";
      EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
      if (d.which_draft == 1) {
        EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens) << "the target drafting for itself";
      }
      if (d.which_draft == 3) {
        EXPECT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
      }
      // Fewer target passes than tokens once anything is accepted.
      if (st.spec_num_accepted_tokens > 0) {
        EXPECT_LT(st.n_decode_tokens - st.spec_num_draft_tokens, kN * kGen);
      }
      EXPECT_EQ(e.n_free_blocks(), kBlocks) << "every block is free again";
    }
  }
}

TEST_F(SpeculativeTest, RollbackLeaksNoBlockOverAThousandRoundsWithPreemptionAndPrefixCaching) {
  // A tight pool (preemption), the hash prefix cache, and an unrelated draft (rejections every
  // round). Tokens must equal the plain run and every block must be free at the end, in the
  // target's pool and in the draft's.
  constexpr int64_t kBlocks = 40;
  auto serve = [&](bool speculate, lio::EngineStats* stats) {
    auto r = runner(*target_, 4, kBlocks);
    auto dr = runner(*bad_, 4, kBlocks);
    lio::EngineConfig cfg;
    cfg.prefix_cache = lio::PrefixCacheMode::Hash;
    cfg.scheduler.max_num_batched_tokens = 32;
    if (speculate) cfg.speculative = config(lio::SpecMethod::Draft, 4);
    lio::Engine e(*r, *target_->tokenizer, cfg, speculate ? dr.get() : nullptr);
    std::map<int64_t, std::vector<int32_t>> out;
    for (int wave = 0; wave < 6; ++wave) {
      for (int i = 0; i < 6; ++i) e.add_request(prompt((i + wave) % 7), greedy(40));
      auto o = run_all(e);
      out.insert(o.begin(), o.end());
    }
    *stats = e.stats();
    EXPECT_EQ(e.n_free_blocks(), kBlocks) << "target pool: a block leaked";
    if (speculate) {
      const auto* p = dynamic_cast<const lio::DraftModelProposer*>(e.proposer());
      EXPECT_NE(p, nullptr);
      if (p != nullptr) {
        EXPECT_EQ(p->n_free_blocks(), kBlocks) << "draft pool: a block leaked";
      }
    }
    return out;
  };
  lio::EngineStats plain_stats, spec_stats;
  const auto want = serve(false, &plain_stats);
  const auto got = serve(true, &spec_stats);
  EXPECT_EQ(got, want) << "preemption or a cache hit changed a token under speculation";
  EXPECT_GE(spec_stats.spec_num_drafts, 1000) << "too few verification rounds to mean anything";
  EXPECT_GT(spec_stats.n_preemptions, 0) << "the pool was meant to run out";
  EXPECT_LT(spec_stats.spec_num_accepted_tokens, spec_stats.spec_num_draft_tokens) << "rejections were meant to happen";
}

/// Upper (1 - alpha) quantile of chi-square with `df` degrees of freedom (Wilson and Hilferty
/// 1931: (X/df)^(1/3) is close to normal with mean 1 - 2/(9 df), variance 2/(9 df)); z is the
/// standard normal's upper quantile.
double chi2_quantile(int df, double z) {
  const double v = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - v + z * std::sqrt(v), 3.0);
}

/// Pearson's chi-square of `counts` against probabilities `p` (over token ids), pooling the
/// tokens expected fewer than 5 times into one cell. Returns {statistic, degrees of freedom};
/// an observed token with p = 0 makes the statistic infinite.
std::pair<double, int> chi_square(const std::map<int32_t, int64_t>& counts, const std::vector<float>& p, int64_t n) {
  double stat = 0, pooled_expected = 0;
  int64_t pooled_observed = 0;
  int cells = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    const auto it = counts.find(static_cast<int32_t>(t));
    const int64_t observed = it == counts.end() ? 0 : it->second;
    const double expected = p[t] * static_cast<double>(n);
    if (p[t] == 0.0f && observed > 0) return {INFINITY, 1};
    if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += observed;
      continue;
    }
    stat += (observed - expected) * (observed - expected) / expected;
    ++cells;
  }
  if (pooled_expected > 0) {
    stat += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  return {stat, std::max(cells - 1, 1)};
}

TEST_F(SpeculativeTest, SampledOutputFollowsTheTargetDistributionForGoodAndBadDrafts) {
  if (lio::test::kAddressSanitizer)
    GTEST_SKIP() << "20,000 sampled requests run in the default build (2 minutes under ASan); the same "
                    "sampled verification paths run under ASan in SeededSampledSpeculationIsReproducible";
  // Thousands of seeded requests of one prompt, 3 tokens each. The first token comes from the
  // prefill; tokens 2 and 3 come out of verification (k = 2). Given the most frequent first
  // token, the second token's empirical distribution must match the target's p(. | prompt, t1)
  // computed directly, and likewise the third given the most frequent pair. Sampling options
  // (temperature, top-k, top-p, repetition penalty) apply to p and q alike.
  // False alarms: each check fails with probability 1e-4 under the null (z = 3.719), about 1e-3
  // over the whole test; the seeds are fixed, so a run is reproducible either way.
  constexpr int64_t kRequests = 5000;
  constexpr double kZ = 3.719;
  lio::SamplingParams params;
  params.max_tokens = 3;
  params.ignore_eos = true;
  params.sampler.temperature = 1.0f;
  params.sampler.top_k = 8;
  params.sampler.top_p = 0.95f;
  params.sampler.repeat_penalty = 1.3f;
  std::vector<int32_t> p0;
  const int64_t vocab = target_->config.vocab_size;

  // The target's own distribution after `prefix`, as plain sampling builds it.
  auto target_probs = [&](const std::vector<int32_t>& prefix) {
    auto r = runner(*target_, 4, 128);
    lio::SoloSequence seq(*r, 512);
    std::span<const float> logits = seq.forward(prefix);
    std::vector<float> row(logits.begin(), logits.end()), p(static_cast<size_t>(vocab));
    lio::Sampler s(params.sampler);
    const std::vector<int32_t> output(prefix.begin() + static_cast<std::ptrdiff_t>(p0.size()), prefix.end());
    s.probabilities(row, prefix, output, p);
    return p;
  };

  struct Case {
    const char* name;
    lio::SpecMethod method;
    const lio::LoadedModel* draft;
  };
  const Case cases[] = {{"perturbed draft", lio::SpecMethod::Draft, near_.get()},
                        {"unrelated draft", lio::SpecMethod::Draft, bad_.get()},
                        {"early exit L=2", lio::SpecMethod::EarlyExit, nullptr},
                        {"ngram", lio::SpecMethod::Ngram, nullptr}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    p0 = c.method == lio::SpecMethod::Ngram ? after_whole_vocab(prompt(2)) : prompt(2);
    auto r = runner(*target_, 16, 2048);
    auto dr = c.draft ? runner(*c.draft, 16, 2048) : nullptr;
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_seqs = 128;
    cfg.scheduler.max_num_batched_tokens = 2048;
    cfg.prefix_cache = lio::PrefixCacheMode::Hash;  // one prompt: its blocks are computed once
    cfg.speculative = config(c.method, 2);
    cfg.speculative.ngram_min = 1;
    lio::Engine e(*r, *target_->tokenizer, cfg, dr.get());
    for (int64_t i = 0; i < kRequests; ++i) {
      lio::SamplingParams p = params;
      p.sampler.seed = 1000 + static_cast<uint64_t>(i);
      e.add_request(p0, p);
    }
    const auto out = run_all(e);
    ASSERT_EQ(static_cast<int64_t>(out.size()), kRequests);
    EXPECT_GT(e.stats().spec_num_draft_tokens, 0);

    std::map<int32_t, int64_t> first;
    for (const auto& [id, ids] : out) {
      ASSERT_EQ(ids.size(), 3u);
      first[ids[0]] += 1;
    }
    const int32_t t1 = std::max_element(first.begin(), first.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    std::map<int32_t, int64_t> second;
    int64_t n2 = 0;
    for (const auto& [id, ids] : out)
      if (ids[0] == t1) second[ids[1]] += 1, ++n2;
    std::vector<int32_t> prefix = p0;
    prefix.push_back(t1);
    const std::vector<float> p_second = target_probs(prefix);
    const auto [stat2, df2] = chi_square(second, p_second, n2);
    EXPECT_LT(stat2, chi2_quantile(df2, kZ)) << "token 2 given token 1 = " << t1 << ", " << n2 << " draws, df " << df2;

    const int32_t t2 = std::max_element(second.begin(), second.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    std::map<int32_t, int64_t> third;
    int64_t n3 = 0;
    for (const auto& [id, ids] : out)
      if (ids[0] == t1 && ids[1] == t2) third[ids[2]] += 1, ++n3;
    prefix.push_back(t2);
    const std::vector<float> p_third = target_probs(prefix);
    const auto [stat3, df3] = chi_square(third, p_third, n3);
    EXPECT_LT(stat3, chi2_quantile(df3, kZ)) << "token 3 given (" << t1 << ", " << t2 << "), " << n3 << " draws";
    EXPECT_GE(n3, 200) << "too few draws for the third token's check to have power";

    // The check has power: the same statistic rejects a wrong distribution (the target's
    // token-2 distribution after another first token).
    if (c.method == lio::SpecMethod::Draft && c.draft == bad_.get()) {
      std::vector<int32_t> other = p0;
      const int32_t t1b = std::next(first.begin())->first == t1 ? first.begin()->first : std::next(first.begin())->first;
      other.push_back(t1b);
      const std::vector<float> p_wrong = target_probs(other);
      const auto [stat_wrong, df_wrong] = chi_square(second, p_wrong, n2);
      EXPECT_GT(stat_wrong, chi2_quantile(df_wrong, kZ)) << "the chi-square check cannot tell distributions apart";
    }
  }
}

TEST_F(SpeculativeTest, SeededSampledSpeculationIsReproducible) {
  // The same seeds give the same tokens run after run: the target's draws come from each
  // sequence's own seeded sampler, the draft's from its own stream seeded from the request.
  auto serve = [&] {
    auto r = runner(*target_, 4, 256);
    auto dr = runner(*near_, 4, 256);
    lio::EngineConfig cfg;
    cfg.speculative = config(lio::SpecMethod::Draft, 3);
    lio::Engine e(*r, *target_->tokenizer, cfg, dr.get());
    for (int i = 0; i < 6; ++i) {
      lio::SamplingParams p = greedy(24);
      p.sampler.temperature = 0.9f;
      p.sampler.top_p = 0.95f;
      p.sampler.seed = 7 + static_cast<uint64_t>(i);
      e.add_request(prompt(i), p);
    }
    auto out = run_all(e);
    EXPECT_GT(e.stats().spec_num_accepted_tokens, 0);
    return out;
  };
  const auto first = serve();
  ASSERT_EQ(first.size(), 6u);
  EXPECT_EQ(serve(), first);
}

TEST_F(SpeculativeTest, BadSettingsAreRefusedBeforeAnythingRuns) {
  auto r = runner(*target_, 4, 64);
  auto dr = runner(*bad_, 4, 64);
  auto make = [&](lio::SpeculativeConfig c, lio::ModelRunner* draft) {
    lio::EngineConfig cfg;
    cfg.speculative = c;
    lio::Engine e(*r, *target_->tokenizer, cfg, draft);
  };
  lio::SpeculativeConfig c = config(lio::SpecMethod::Ngram, 0);
  EXPECT_THROW(make(c, nullptr), lio::InvalidArgument);  // k < 1
  c.num_speculative_tokens = 17;
  EXPECT_THROW(make(c, nullptr), lio::InvalidArgument);  // k > 16
  c = config(lio::SpecMethod::EarlyExit, 4);
  for (const int64_t L : {0, 4, 9}) {
    c.draft_layers = L;
    EXPECT_THROW(make(c, nullptr), lio::InvalidArgument) << "L = " << L;
  }
  c = config(lio::SpecMethod::Ngram, 4);
  c.ngram_min = 0;
  EXPECT_THROW(make(c, nullptr), lio::InvalidArgument);
  c = config(lio::SpecMethod::Draft, 4);
  EXPECT_THROW(make(c, nullptr), lio::InvalidArgument);  // no draft runner
  EXPECT_NO_THROW(make(c, dr.get()));
  lio::EngineConfig no_cache;
  no_cache.reuse_kv = false;
  no_cache.speculative = config(lio::SpecMethod::Ngram, 4);
  EXPECT_THROW(lio::Engine(*r, *target_->tokenizer, no_cache), lio::InvalidArgument);

  // A draft with another vocabulary: the tokenizer check names the difference.
  TinyModelSpec other = spec_with(1, 0.2f);
  other.merges = {"Ġ t", "h e"};
  const auto other_model = load("other.gguf", other);
  try {
    lio::check_draft_tokenizer(*target_->tokenizer, *other_model->tokenizer);
    ADD_FAILURE() << "a draft with another vocabulary was accepted";
  } catch (const lio::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer differs"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(lio::check_draft_tokenizer(*target_->tokenizer, *bad_->tokenizer));
  EXPECT_EQ(lio::parse_spec_method("eagle"), lio::SpecMethod::Eagle);
  EXPECT_THROW(lio::parse_spec_method("hydra"), lio::InvalidArgument);
  EXPECT_EQ(lio::parse_spec_method("medusa"), lio::SpecMethod::Medusa);
}

TEST_F(SpeculativeTest, TypicalAcceptanceKeepsGreedyOutputAndReplaysSeededSampling) {
  // Medusa's typical acceptance (lio/typical_acceptance.h) on chains: greedy output is plain
  // greedy's for a draft model and for n-gram lookup; sampled output replays under the same
  // seeds and keeps more of the drafts than the exact rule on the same requests (it accepts
  // every draft the target gives p > min(0.09, 0.3 exp(-H)), where the exact rule tests p / q).
  constexpr int kN = 6;
  constexpr int64_t kGen = 16;
  auto serve = [&](lio::SpecMethod method, lio::SpecAcceptance acceptance, float temperature) {
    auto r = runner(*target_, 4, 512);
    auto dr = method == lio::SpecMethod::Draft ? runner(*near_, 4, 512) : nullptr;
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_batched_tokens = 24;
    if (method != lio::SpecMethod::None) {
      cfg.speculative = config(method, 3);
      cfg.speculative.ngram_min = 1;  // with the whole vocabulary before it, lookup always drafts
      cfg.speculative.acceptance = acceptance;
    }
    lio::Engine e(*r, *target_->tokenizer, cfg, dr.get());
    for (int i = 0; i < kN; ++i) {
      lio::SamplingParams p = greedy(kGen);
      p.sampler.temperature = temperature;
      p.sampler.seed = 11 + static_cast<uint64_t>(i);
      e.add_request(method == lio::SpecMethod::Ngram ? after_whole_vocab(prompt(i)) : prompt(i), p);
    }
    auto out = run_all(e);
    EXPECT_EQ(e.n_free_blocks(), 512) << "every block is free again";
    return std::make_pair(out, e.stats());
  };
  const auto plain_short = serve(lio::SpecMethod::None, lio::SpecAcceptance::Rejection, 0.0f).first;
  const auto plain_long = [&] {
    auto r = runner(*target_, 4, 512);
    lio::EngineConfig cfg;
    cfg.scheduler.max_num_batched_tokens = 24;
    lio::Engine e(*r, *target_->tokenizer, cfg);
    for (int i = 0; i < kN; ++i) e.add_request(after_whole_vocab(prompt(i)), greedy(kGen));
    return run_all(e);
  }();
  for (const lio::SpecMethod m : {lio::SpecMethod::Draft, lio::SpecMethod::Ngram}) {
    SCOPED_TRACE(lio::spec_method_name(m));
    const auto [got, st] = serve(m, lio::SpecAcceptance::Typical, 0.0f);
    EXPECT_EQ(got, m == lio::SpecMethod::Ngram ? plain_long : plain_short);
    EXPECT_GT(st.spec_num_accepted_tokens, 0);
  }
  const auto [typical, typical_st] = serve(lio::SpecMethod::Draft, lio::SpecAcceptance::Typical, 1.0f);
  EXPECT_EQ(serve(lio::SpecMethod::Draft, lio::SpecAcceptance::Typical, 1.0f).first, typical);
  for (const auto& [id, ids] : typical) EXPECT_EQ(static_cast<int64_t>(ids.size()), kGen) << "request " << id;
  const auto [exact, exact_st] = serve(lio::SpecMethod::Draft, lio::SpecAcceptance::Rejection, 1.0f);
  const auto rate = [](const lio::EngineStats& s) {
    return static_cast<double>(s.spec_num_accepted_tokens) / static_cast<double>(s.spec_num_draft_tokens);
  };
  EXPECT_GT(rate(typical_st), rate(exact_st)) << "typical " << typical_st.spec_num_accepted_tokens << " of "
                                              << typical_st.spec_num_draft_tokens << ", exact "
                                              << exact_st.spec_num_accepted_tokens << " of "
                                              << exact_st.spec_num_draft_tokens;

  // Its settings are checked with the rest.
  lio::SpeculativeConfig c = config(lio::SpecMethod::Ngram, 4);
  c.acceptance = lio::SpecAcceptance::Typical;
  EXPECT_NO_THROW(c.validate(4));
  for (const double eps : {0.0, -0.1, 1.5}) {
    c.typical_posterior_threshold = eps;
    EXPECT_THROW(c.validate(4), lio::InvalidArgument) << "epsilon " << eps;
  }
  c.typical_posterior_threshold = 0.09;
  c.typical_posterior_alpha = -1.0;
  EXPECT_THROW(c.validate(4), lio::InvalidArgument);
  EXPECT_EQ(lio::parse_spec_acceptance("typical"), lio::SpecAcceptance::Typical);
  EXPECT_EQ(lio::parse_spec_acceptance("rejection"), lio::SpecAcceptance::Rejection);
  EXPECT_THROW(lio::parse_spec_acceptance("lossy"), lio::InvalidArgument);
}

}  // namespace
