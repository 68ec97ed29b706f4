// Chapter 08, Task 6: one tensor-parallel Llama decoder layer over the rank's shards
// (exercises/08_tensor_parallel/tp_decoder_layer.cpp, lio/tp_decoder_layer.h), graded through
// the engine that runs on it: the tensor-parallel runner at TP 2 on tiny random llama models
// must give the logits of one rank and of the Llama equations in double precision
// (tests/support/reference_forward.h), in prefill and one token at a time from the KV cache.
//
// Runs as an MPI job: ctest starts it as `scripts/mpirun.sh -n 2 <this binary>`. Rank 0 drives
// the runner and checks; rank 1 serves its shard (ModelRunner::serve_worker). With one rank the
// cases skip. No ASSERT_* between collectives on the driver before the workers are stopped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "lio/communicator.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/parallel.h"
#include "reference_forward.h"
#include "tiny_model.h"

namespace lio {
namespace {

using testing::TinyModelSpec;

const std::vector<int32_t> kTokensA = {5, 17, 200, 3, 99, 140, 7, 250, 33, 61, 12, 180};
const std::vector<int32_t> kTokensB = {262, 4, 88, 151, 9, 230, 41, 76, 2, 199};

// f32 through 2-3 layers of width 64 against double precision: ~1e-4 on logits of size 1-10
// (chapter 01's Task 5 uses the same bound). Against one rank the only difference is the order
// of the row-parallel sums: 1e-5 of the largest logit.
constexpr double kTolEquations = 2e-3;
constexpr double kTolOneRank = 1e-5;

LoadedModel tiny_model(const TinyModelSpec& spec, const std::string& name) {
  const std::string dir = testing::make_temp_dir("lio_ch08_t6");
  const std::string path = dir + "/" + name + ".gguf";
  testing::write_tiny_gguf(path, spec);
  LoadedModel m = load_model(path, WeightMode::AsStored);
  std::filesystem::remove_all(dir);
  return m;
}

TinyModelSpec llama_spec(int64_t n_heads, int64_t n_kv_heads, int64_t n_layers) {
  TinyModelSpec s;
  s.n_layers = n_layers;
  s.d_model = 64;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = 64 / n_heads;
  s.d_ff = 96;                 // 48 features per rank
  s.tied_embeddings = false;   // the LM head is its own vocabulary-parallel matrix
  s.merges.push_back("a n");   // 265 tokens: the last vocabulary shard is padded at TP 2
  return s;
}

/// One workload's logits rows, as (rows, vocab) row-major, and which token position of which
/// prompt each row is (to look it up in the reference).
struct Rows {
  std::vector<float> logits;
  std::vector<std::pair<int, int64_t>> at;  ///< (prompt 0 = A / 1 = B, position)
};

/// Runs `workload` on rank 0 over the TP-2 runner and over a one-rank runner, and checks both
/// against the equations and each other; rank 1 serves its shard meanwhile.
void expect_tp_layer_right(const TinyModelSpec& spec, const std::string& name,
                           const std::function<Rows(ModelRunner&)>& workload) {
  std::unique_ptr<Communicator> world = world_communicator();
  const int64_t tp = world->size();
  if (tp != 2) GTEST_SKIP() << "runs with 2 ranks (scripts/mpirun.sh -n 2)";
  const LoadedModel model = tiny_model(spec, name);
  const KvPoolOptions kv{4, 8, KvCacheDType::F32};  // blocks of 4 tokens: rows read other blocks
  std::unique_ptr<ModelRunner> runner = make_parallel_runner(model, ParallelConfig{tp, 1}, std::move(world),
                                                             Device::Cpu, kv, ActivationPrecision::F32,
                                                             AttentionBackend::Flash);
  if (!runner->is_driver()) {
    // A layer that throws throws on both ranks at the same point of the same forward pass. The
    // worker then waits for the driver's stop (sent as the driver's throw unwinds its runner) and
    // throws too, so that both ranks leave the test case together and the next collective matches.
    std::string error;
    for (;;) {
      try {
        runner->serve_worker();
        break;
      } catch (const std::exception& e) {
        if (error.empty()) error = e.what();
      }
    }
    if (!error.empty()) throw std::runtime_error("rank 1: " + error);
    return;
  }
  const Rows got = workload(*runner);  // a throw here stops the workers from the runner's destructor
  runner->stop_workers();
  std::unique_ptr<ModelRunner> single = make_runner(model, Device::Cpu, kv, ActivationPrecision::F32);
  const Rows want = workload(*single);
  const int64_t vocab = spec.vocab_size();
  ASSERT_EQ(got.logits.size(), want.logits.size());
  ASSERT_EQ(static_cast<int64_t>(got.logits.size()), static_cast<int64_t>(got.at.size()) * vocab);
  const std::vector<double> ref[2] = {testing::reference_logits(spec, kTokensA),
                                      testing::reference_logits(spec, kTokensB)};
  double scale = 0;
  for (float w : want.logits) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  // The worst row against each: one message per comparison, naming the row.
  double worst_one = 0, worst_eq = 0;
  size_t row_one = 0, row_eq = 0;
  for (size_t r = 0; r < got.at.size(); ++r) {
    const auto [prompt, pos] = got.at[r];
    for (int64_t v = 0; v < vocab; ++v) {
      const size_t i = r * static_cast<size_t>(vocab) + static_cast<size_t>(v);
      const double vs_one = std::fabs(static_cast<double>(got.logits[i]) - want.logits[i]);
      const double vs_eq =
          std::fabs(static_cast<double>(got.logits[i]) - ref[prompt][static_cast<size_t>(pos * vocab + v)]);
      if (vs_one > worst_one) worst_one = vs_one, row_one = r;
      if (vs_eq > worst_eq) worst_eq = vs_eq, row_eq = r;
    }
  }
  const auto where = [&](size_t r) {
    return name + ": logits of prompt " + (got.at[r].first == 0 ? "A" : "B") + " at position " +
           std::to_string(got.at[r].second) + " (row " + std::to_string(r) + " of " + std::to_string(got.at.size()) +
           ")";
  };
  EXPECT_LE(worst_one, kTolOneRank * scale) << where(row_one) << " differ from one rank's by " << worst_one
                                            << " (largest logit " << scale << ")";
  EXPECT_LT(worst_eq, kTolEquations) << where(row_eq) << " differ from the Llama equations by " << worst_eq;
}

/// Prompt A whole in one prefill, every row's logits.
Rows prefill_all_rows(ModelRunner& runner) {
  const int64_t bs = runner.kv_pool().block_size();
  ForwardBatch batch(bs);
  batch.add_sequence(kTokensA, 0, std::vector<int32_t>{0, 1, 2}, static_cast<int64_t>(kTokensA.size()));
  const std::span<const float> l = runner.forward(batch);
  Rows out{{l.begin(), l.end()}, {}};
  for (int64_t t = 0; t < static_cast<int64_t>(kTokensA.size()); ++t) out.at.emplace_back(0, t);
  return out;
}

/// Prompts A (3 tokens) and B (5 tokens) prefilled in one batch, then both decoded one token per
/// step in one batch of two rows: each step computes K/V for its own rows only and reads every
/// earlier position from the cache, in blocks of 4.
Rows decode_from_cache(ModelRunner& runner) {
  const int64_t bs = runner.kv_pool().block_size();
  const std::vector<int32_t> table_a{0, 1, 2}, table_b{3, 4, 5};
  Rows out;
  auto keep = [&](std::span<const float> l) { out.logits.insert(out.logits.end(), l.begin(), l.end()); };
  int64_t pos_a = 3, pos_b = 5;
  ForwardBatch first(bs);
  first.add_sequence(std::span(kTokensA.data(), 3), 0, table_a);
  first.add_sequence(std::span(kTokensB.data(), 5), 0, table_b);
  keep(runner.forward(first));
  out.at.emplace_back(0, pos_a - 1);
  out.at.emplace_back(1, pos_b - 1);
  while (pos_b < static_cast<int64_t>(kTokensB.size())) {
    ForwardBatch step(bs);
    step.add_sequence(std::span(&kTokensA[static_cast<size_t>(pos_a)], 1), pos_a, table_a);
    step.add_sequence(std::span(&kTokensB[static_cast<size_t>(pos_b)], 1), pos_b, table_b);
    keep(runner.forward(step));
    out.at.emplace_back(0, pos_a++);
    out.at.emplace_back(1, pos_b++);
  }
  ForwardBatch last(bs);  // A alone: one row
  last.add_sequence(std::span(&kTokensA[static_cast<size_t>(pos_a)], 1), pos_a, table_a);
  keep(runner.forward(last));
  out.at.emplace_back(0, pos_a);
  return out;
}

// GQA 4:2 at TP 2: each rank 2 query heads of 16, the 1 KV head they read, 48 of the 96 MLP
// features; both all-reduces into the residual stream, every row of a 12-token prefill.
TEST(Ch08Task6, PrefillLogitsEqualOneRankAndTheEquations) {
  expect_tp_layer_right(llama_spec(4, 2, 2), "gqa_4_2", prefill_all_rows);
}

// Three layers, two sequences decoding side by side from a cache of 4-token blocks.
TEST(Ch08Task6, DecodingFromTheCacheEqualsOneRankAndTheEquations) {
  expect_tp_layer_right(llama_spec(4, 2, 3), "gqa_decode", decode_from_cache);
}

// The other head layouts that split evenly over 2 ranks: MHA (2 KV heads per rank), MQA (the one
// KV head on both ranks) and 8 heads of 8 over 2 KV heads (4 query heads per rank, one group).
TEST(Ch08Task6, EveryEvenHeadSplitEqualsOneRankAndTheEquations) {
  struct Heads {
    int64_t n_heads, n_kv_heads;
    const char* name;
  };
  for (const Heads h : {Heads{4, 4, "mha_4_4"}, Heads{4, 1, "mqa_4_1"}, Heads{8, 2, "gqa_8_2"}}) {
    SCOPED_TRACE(h.name);
    expect_tp_layer_right(llama_spec(h.n_heads, h.n_kv_heads, 2), h.name, prefill_all_rows);
  }
}

}  // namespace
}  // namespace lio
