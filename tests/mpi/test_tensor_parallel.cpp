// test_tensor_parallel.cpp — chapter 08's engine over ranks, run under mpirun (label mpi):
// tensor-, pipeline- and TP x PP-parallel runners give the single-rank logits on tiny random
// models (TP 2/4/8 with KV-head replication, PP 2/3/4, TP 2 x PP 2 and 4 x 2), on the real model
// at TP 3 (logits within 1e-5 of the largest logit, the same greedy tokens), each rank holds 1/N
// of the sharded weights and of the KV bytes (read off its backend and pool), and a bad size is
// refused with the sizes that work. Each grid runs on as many groups of the world as fit.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lio/communicator.h"
#include "lio/engine.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/parallel.h"
#include "tiny_model.h"

namespace lio {
namespace {

/// A small mixed workload: two prompts (every row's logits), then three decode steps of both in
/// one batch. Returns every logits row, concatenated.
std::vector<float> run_workload(ModelRunner& runner, const std::vector<int32_t>& prompt_a,
                                const std::vector<int32_t>& prompt_b, int64_t vocab) {
  const int64_t bs = runner.kv_pool().block_size();
  const std::vector<int32_t> table_a{0, 1, 2, 3}, table_b{4, 5, 6, 7};
  std::vector<float> out;
  auto keep = [&](std::span<const float> l) { out.insert(out.end(), l.begin(), l.end()); };
  ForwardBatch first(bs);
  first.add_sequence(prompt_a, 0, table_a, static_cast<int64_t>(prompt_a.size()));
  keep(runner.forward(first));
  ForwardBatch second(bs);
  second.add_sequence(prompt_b, 0, table_b, static_cast<int64_t>(prompt_b.size()));
  keep(runner.forward(second));
  auto pos_a = static_cast<int64_t>(prompt_a.size()), pos_b = static_cast<int64_t>(prompt_b.size());
  int32_t next_a = 7, next_b = 11;
  for (int step = 0; step < 3; ++step) {
    ForwardBatch decode(bs);
    decode.add_sequence(std::vector<int32_t>{next_a}, pos_a++, table_a);
    decode.add_sequence(std::vector<int32_t>{next_b}, pos_b++, table_b);
    std::span<const float> l = runner.forward(decode);
    keep(l);
    next_a = static_cast<int32_t>(std::max_element(l.begin(), l.begin() + vocab) - l.begin());
    next_b = static_cast<int32_t>(std::max_element(l.begin() + vocab, l.end()) - (l.begin() + vocab));
  }
  return out;
}

/// Draft-tree verification over ranks (issue 63, item 4): the two prompts, then ONE pass of a
/// 5-node branching tree after A and two plain tokens plus a 3-node chain tree after B
/// (ForwardBatch::set_tree: the workers must get the masks, or their heads attend causally).
/// Returns every logits row of the three passes.
std::vector<float> run_tree_workload(ModelRunner& runner, const std::vector<int32_t>& prompt_a,
                                     const std::vector<int32_t>& prompt_b, int64_t) {
  const int64_t bs = runner.kv_pool().block_size();
  const std::vector<int32_t> table_a{0, 1, 2, 3}, table_b{4, 5, 6, 7};
  std::vector<float> out;
  auto keep = [&](std::span<const float> l) { out.insert(out.end(), l.begin(), l.end()); };
  ForwardBatch first(bs);
  first.add_sequence(prompt_a, 0, table_a, 1);
  first.add_sequence(prompt_b, 0, table_b, 1);
  keep(runner.forward(first));
  ForwardBatch tree(bs);
  tree.add_sequence(std::vector<int32_t>{7, 21, 22, 23, 24}, static_cast<int64_t>(prompt_a.size()), table_a, 5);
  tree.add_sequence(std::vector<int32_t>{11, 12, 13, 30, 31}, static_cast<int64_t>(prompt_b.size()), table_b, 5);
  tree.set_tree(0, std::vector<uint64_t>{1, 3, 5, 11, 0b10101});  // parents -1 0 0 1 2
  tree.set_tree(1, std::vector<uint64_t>{1, 3, 7});               // the last 3 rows: a chain
  keep(runner.forward(tree));
  return out;
}

/// max |a - b| / max |b|: the error relative to the largest logit.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

/// The argmax of each vocab-wide row.
std::vector<int64_t> argmaxes(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int64_t> out;
  for (size_t r = 0; r + static_cast<size_t>(vocab) <= logits.size(); r += static_cast<size_t>(vocab)) {
    out.push_back(std::max_element(logits.begin() + static_cast<std::ptrdiff_t>(r),
                                   logits.begin() + static_cast<std::ptrdiff_t>(r) + vocab) -
                  (logits.begin() + static_cast<std::ptrdiff_t>(r)));
  }
  return out;
}

/// What one rank of a grid holds, gathered on every rank of `comm`: {weight bytes, KV bytes}.
std::vector<float> gather_bytes(Communicator& comm, ModelRunner& runner) {
  const float mine[2] = {static_cast<float>(runner.backend().weight_bytes()),
                         static_cast<float>(runner.kv_pool().size_bytes() / runner.kv_pool().n_blocks())};
  std::vector<float> all(static_cast<size_t>(2 * comm.size()));
  comm.all_gather(mine, all.data(), 2);
  return all;
}

struct GridCase {
  int64_t tp, pp;
};

/// Runs `model` on every grid of `grids` that fits the world: the world is cut into groups of
/// tp x pp ranks, each group's driver compares its grid's logits with a single-rank runner of its
/// own; the others serve. Returns nothing; failures are the driver's assertions.
using Workload = std::vector<float> (*)(ModelRunner&, const std::vector<int32_t>&, const std::vector<int32_t>&, int64_t);

void check_grids(const LoadedModel& model, const std::vector<GridCase>& grids, double tolerance,
                 Workload workload = run_workload) {
  std::unique_ptr<Communicator> world = world_communicator();
  const int64_t vocab = model.config.vocab_size;
  const std::vector<int32_t> prompt_a{5, 9, 200, 31, 77, 4, 18}, prompt_b{static_cast<int32_t>(260 % vocab), 3, 99, 42, 12};
  int ran = 0;
  for (const GridCase& g : grids) {
    const int64_t n = g.tp * g.pp;
    if (n == 1 || world->size() % n != 0) continue;
    SCOPED_TRACE("tp " + std::to_string(g.tp) + " x pp " + std::to_string(g.pp));
    ++ran;
    std::unique_ptr<Communicator> group = world->split(static_cast<int>(world->rank() / n), world->rank());
    const int64_t full_kv_block = kv_block_bytes(model.config, 4);
    std::unique_ptr<ModelRunner> runner = make_parallel_runner(
        model, ParallelConfig{g.tp, g.pp}, std::move(group), Device::Cpu, KvPoolOptions{4, 8, KvCacheDType::F32},
        ActivationPrecision::F32, AttentionBackend::Flash);
    // Pipelines cut each step into micro-batches (the decode steps' two sequences go one by one).
    if (runner->parallel() != nullptr && g.pp > 1) runner->parallel()->micro_batches = 2;
    // Measured on each rank: its backend's weight bytes and its pool's bytes per block.
    const std::vector<float> held = gather_bytes(*runner->parallel()->world, *runner);
    if (!runner->is_driver()) {
      runner->serve_worker();
      continue;
    }
    std::unique_ptr<ModelRunner> single =
        make_runner(model, Device::Cpu, KvPoolOptions{4, 8, KvCacheDType::F32}, ActivationPrecision::F32);
    const std::vector<float> want = workload(*single, prompt_a, prompt_b, vocab);
    const std::vector<float> got = workload(*runner, prompt_a, prompt_b, vocab);
    runner->stop_workers();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(relative_error(got, want), tolerance);
    EXPECT_EQ(argmaxes(got, vocab), argmaxes(want, vocab));
    // Each rank's KV block: its stage's layers and its KV heads (replicated past n_kv_heads).
    const int64_t kv_held = std::min(model.config.n_kv_heads, g.tp);
    for (int64_t r = 0; r < n; ++r) {
      const RankPlan plan = make_rank_plan(model.config, model.weights, {g.tp, g.pp}, r);
      const double layers = static_cast<double>(plan.layer_end - plan.layer_begin) / static_cast<double>(model.config.n_layers);
      EXPECT_DOUBLE_EQ(held[static_cast<size_t>(2 * r + 1)],
                       static_cast<double>(full_kv_block) * layers / static_cast<double>(kv_held))
          << "rank " << r;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no grid of these fits a world of " << world->size();
}

LoadedModel tiny_model(testing::TinyModelSpec spec, const std::string& name) {
  const std::string dir = testing::make_temp_dir("lio_tp");
  const std::string path = dir + "/" + name + ".gguf";
  testing::write_tiny_gguf(path, spec);
  LoadedModel m = load_model(path, WeightMode::AsStored);
  std::filesystem::remove_all(dir);
  return m;
}

testing::TinyModelSpec eight_heads() {
  testing::TinyModelSpec s;
  s.n_layers = 4;
  s.d_model = 64;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.d_ff = 256;
  return s;
}

const std::vector<GridCase> kGrids{{2, 1}, {4, 1}, {8, 1}, {1, 2}, {1, 3}, {1, 4}, {2, 2}, {4, 2}};

TEST(TensorParallel, F32TinyModelEqualsOneRank) {
  check_grids(tiny_model(eight_heads(), "f32"), kGrids, 1e-5);
}

// Tree verification under TP 2 / 4, PP 2 (micro-batches cut the trees with their sequences) and
// TP 2 x PP 2: the tree masks travel in the driver's batch (runner_rpc) to every rank.
TEST(TensorParallel, DraftTreeVerificationEqualsOneRank) {
  check_grids(tiny_model(eight_heads(), "tree"), {{2, 1}, {4, 1}, {1, 2}, {2, 2}}, 1e-5, run_tree_workload);
}

TEST(TensorParallel, Q8TinyModelWithPaddedVocabularyEqualsOneRank) {
  testing::TinyModelSpec s = eight_heads();
  s.weight_dtype = DType::Q8_0;
  s.embd_dtype = DType::Q8_0;
  s.merges.push_back("a n");  // 265 tokens: the last tensor-parallel shard is zero-padded
  s.tied_embeddings = false;
  check_grids(tiny_model(s, "q8"), {{2, 1}, {4, 1}, {2, 2}}, 1e-5);
}

// qwen2's Q/K/V biases split with their projections' rows (replicated with the KV heads at tp 4);
// qwen3's QK-norm weights act per head and go whole to every rank; gemma3's post-norms need the
// whole all-reduced sub-block output, and a pipeline stage's windowed layers follow their global
// index (6 layers: five windowed, then a global one, split 3 + 3 at pp 2).
TEST(TensorParallel, Qwen2Qwen3AndGemma3TinyModelsEqualOneRank) {
  for (const std::string arch : {"qwen2", "qwen3", "gemma3"}) {
    testing::TinyModelSpec s = eight_heads();
    s.architecture = arch;
    s.tied_embeddings = arch != "qwen2";
    if (arch == "gemma3") {
      s.n_layers = 6;
      s.sliding_window = 4;
    }
    check_grids(tiny_model(s, arch), {{2, 1}, {4, 1}, {1, 2}, {2, 2}}, 1e-5);
  }
}

// A hybrid KV cache (gemma3's sliding-window layers; lio/kv_cache_coordinator.h) under tensor
// parallelism: every rank's pool keeps the KV cache groups, each forward batch carries every
// group's tables (runner_rpc.h), and an Engine over TP 2 gives one rank's greedy tokens.
TEST(TensorParallel, HybridKvCacheEngineAtTp2EqualsOneRank) {
  std::unique_ptr<Communicator> world = world_communicator();
  if (world->size() % 2 != 0) GTEST_SKIP() << "runs in groups of 2 ranks (a world of " << world->size() << ")";
  testing::TinyModelSpec s = eight_heads();
  s.architecture = "gemma3";
  s.n_layers = 6;  // five windowed layers, then a global one: six groups
  s.sliding_window = 4;
  const LoadedModel model = tiny_model(s, "gemma3_hybrid");
  std::unique_ptr<Communicator> group = world->split(static_cast<int>(world->rank() / 2), world->rank());
  const KvPoolOptions kv{4, 8, KvCacheDType::F32, true};
  std::unique_ptr<ModelRunner> runner = make_parallel_runner(model, ParallelConfig{2, 1}, std::move(group), Device::Cpu,
                                                             kv, ActivationPrecision::F32, AttentionBackend::Flash);
  EXPECT_EQ(runner->kv_pool().n_groups(), 6) << "every rank keeps the groups";
  if (!runner->is_driver()) {
    runner->serve_worker();
    return;
  }
  std::unique_ptr<ModelRunner> single = make_runner(model, Device::Cpu, kv, ActivationPrecision::F32);
  const auto serve = [&](ModelRunner& r) {
    EngineConfig cfg;
    cfg.scheduler.max_num_batched_tokens = 8;  // prompts in chunks: windowed blocks slide out
    Engine e(r, *model.tokenizer, cfg);
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> p;
      for (int k = 0; k < 10 + 5 * i; ++k) p.push_back(3 + (k * 37 + i * 11) % 250);
      SamplingParams sp;
      sp.max_tokens = 12;
      sp.ignore_eos = true;
      sp.sampler.temperature = 0.0f;
      e.add_request(p, sp);
    }
    std::map<int64_t, std::vector<int32_t>> out;
    for (int guard = 0; e.has_unfinished() && guard < 2000; ++guard)
      for (const RequestOutput& o : e.step()) out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
    return out;
  };
  const std::map<int64_t, std::vector<int32_t>> want = serve(*single);
  const std::map<int64_t, std::vector<int32_t>> got = serve(*runner);
  runner->stop_workers();
  ASSERT_EQ(want.size(), 3u);
  for (const auto& [id, tokens] : want) EXPECT_EQ(tokens.size(), 12u) << "request " << id;
  EXPECT_EQ(got, want);
}

TEST(TensorParallel, ShardHoldsItsPartOfTheWeights) {
  const LoadedModel m = tiny_model(eight_heads(), "f32");
  const auto matrix_bytes = [](const Weights& w) {
    int64_t b = w.token_embd.size_bytes();
    for (const LayerWeights& L : w.layers) {
      b += L.matrix(WeightKind::Wq).size_bytes() + L.matrix(WeightKind::Wk).size_bytes() +
           L.matrix(WeightKind::Wv).size_bytes() + L.matrix(WeightKind::Wo).size_bytes() +
           L.matrix(WeightKind::Gate).size_bytes() + L.matrix(WeightKind::Up).size_bytes() +
           L.matrix(WeightKind::Down).size_bytes();
    }
    return b;
  };
  for (int64_t tp : {2, 4}) {
    int64_t sum = 0;
    for (int64_t r = 0; r < tp; ++r) {
      const LoadedModel shard = shard_model(m, make_rank_plan(m.config, m.weights, {tp, 1}, r));
      // Q/O/gate/up/down and the vocabulary split in tp; K/V (2 KV heads) in min(tp, 2).
      sum += matrix_bytes(shard.weights);
      EXPECT_EQ(shard.config.n_heads, 8 / tp);
      EXPECT_EQ(shard.config.d_ff, 256 / tp);
    }
    EXPECT_EQ(sum, matrix_bytes(m.weights) + (tp == 4 ? 4 * 2 * 16 * 64 * 4 * 2 : 0))  // tp 4: K/V replicated twice
        << "tp " << tp;
  }
}

TEST(TensorParallel, BadSizeNamesTheSizesThatWork) {
  const LoadedModel m = tiny_model(eight_heads(), "f32");
  try {
    make_rank_plan(m.config, m.weights, {3, 1}, 0);
    FAIL() << "tp 3 accepted for 8 query heads";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("1, 2, 4, 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_rank_plan(m.config, m.weights, {1, 5}, 0), InvalidArgument);  // 4 layers
}

TEST(TensorParallel, RealModelTp3EqualsOneRank) {
  const std::string path = default_model_path();
  std::unique_ptr<Communicator> world = world_communicator();
  if (world->size() != 3) GTEST_SKIP() << "runs with 3 ranks (mpirun -n 3)";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model missing: " << path << " (scripts/setup.sh fetches it)";
  const LoadedModel m = load_model(path, WeightMode::AsStored);
  check_grids(m, {{3, 1}}, 1e-5);
}

}  // namespace
}  // namespace lio
