// Chapter 08, Task 5: the Megatron-LM forward on one rank — the row-parallel sum, the
// vocabulary-parallel embedding's ids and the LM head's gathered logits
// (exercises/08_tensor_parallel/tensor_parallel.cpp: row_parallel_linear, localize_vocab_ids,
// gather_vocab_shards), graded on their own and through the engine: the tensor-parallel runner,
// which calls them for every layer, must give one rank's logits.
//
// Runs as an MPI job: ctest starts it as `scripts/mpirun.sh -n 2 <this binary>`. The first tests
// need no peer (every rank runs them alone: a group of ranks is played in one process); the
// engine tests run the model at TP 2 over the world against a single-rank runner on rank 0 and
// skip with one rank. Only rank 0 prints GoogleTest's report. No ASSERT_* between collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "lio/communicator.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/parallel.h"
#include "lio/tensor_parallel.h"
#include "tiny_model.h"

namespace lio {
namespace {

// ---- row_parallel_linear, a group played in one process ------------------------------------

/// One rank of a simulated group: its partial product (n floats), and what row_parallel_linear
/// did with it.
struct SimRank {
  std::vector<float> partial;
  std::vector<float> out;  ///< the buffer handed to row_parallel_linear (the residual before)
  int partial_calls = 0;
  int all_reduce_calls = 0;
  int64_t reduced_count = -1;
};

/// Runs row_parallel_linear on each of `ranks` as rank r of a group of ranks.size(), with an
/// all_reduce that records what it was given; then sums the buffers the ranks handed to their
/// all-reduce (what a real one would give every rank) into the returned vector.
std::vector<float> play_group(std::vector<SimRank>& ranks, int64_t count, bool add_to_out) {
  const auto size = static_cast<int64_t>(ranks.size());
  for (int64_t r = 0; r < size; ++r) {
    SimRank& me = ranks[static_cast<size_t>(r)];
    TpGroup g;
    g.rank = r;
    g.size = size;
    if (size > 1) {
      g.all_reduce = [&me](float*, int64_t n) {
        ++me.all_reduce_calls;
        me.reduced_count = n;
      };
    }
    const PartialProduct partial = [&me, count](float* y, bool accumulate) {
      ++me.partial_calls;
      for (int64_t i = 0; i < count; ++i) {
        y[i] = (accumulate ? y[i] : 0.0f) + me.partial[static_cast<size_t>(i)];
      }
    };
    row_parallel_linear(partial, me.out.data(), count, add_to_out, g);
  }
  std::vector<float> sum(static_cast<size_t>(count), 0.0f);
  for (const SimRank& me : ranks) {
    for (int64_t i = 0; i < count; ++i) sum[static_cast<size_t>(i)] += me.out[static_cast<size_t>(i)];
  }
  return sum;
}

std::vector<SimRank> make_ranks(int64_t size, int64_t count, const std::vector<float>& residual) {
  std::vector<SimRank> ranks(static_cast<size_t>(size));
  for (int64_t r = 0; r < size; ++r) {
    SimRank& me = ranks[static_cast<size_t>(r)];
    me.out = residual;
    for (int64_t i = 0; i < count; ++i) me.partial.push_back(static_cast<float>((r + 1) * 10 + i));
  }
  return ranks;
}

TEST(Task5RowParallel, ResidualCountedOnceAndOneAllReducePerRank) {
  const int64_t count = 6;
  const std::vector<float> residual{1, -2, 3, -4, 5, -6};
  for (int64_t size : {2, 3, 4}) {
    SCOPED_TRACE("group of " + std::to_string(size));
    std::vector<SimRank> ranks = make_ranks(size, count, residual);
    const std::vector<float> got = play_group(ranks, count, /*add_to_out=*/true);
    for (int64_t i = 0; i < count; ++i) {
      float want = residual[static_cast<size_t>(i)];
      for (const SimRank& me : ranks) want += me.partial[static_cast<size_t>(i)];
      EXPECT_FLOAT_EQ(got[static_cast<size_t>(i)], want) << "element " << i;
    }
    for (const SimRank& me : ranks) {
      EXPECT_EQ(me.partial_calls, 1);
      EXPECT_EQ(me.all_reduce_calls, 1);
      EXPECT_EQ(me.reduced_count, count);
    }
  }
}

// gemma3's post-norm: the sub-block's output alone, summed, whatever the buffer held before.
TEST(Task5RowParallel, WithoutResidualTheBufferIsOverwritten) {
  const int64_t count = 4;
  const std::vector<float> garbage{1e6f, -1e6f, 7, 8};
  for (int64_t size : {1, 3}) {
    std::vector<SimRank> ranks = make_ranks(size, count, garbage);
    const std::vector<float> got = play_group(ranks, count, /*add_to_out=*/false);
    for (int64_t i = 0; i < count; ++i) {
      float want = 0;
      for (const SimRank& me : ranks) want += me.partial[static_cast<size_t>(i)];
      EXPECT_FLOAT_EQ(got[static_cast<size_t>(i)], want) << "size " << size << ", element " << i;
    }
  }
}

TEST(Task5RowParallel, OneRankAddsItsProductWithoutAllReduce) {
  const std::vector<float> residual{2, 4, 6};
  std::vector<SimRank> ranks = make_ranks(1, 3, residual);
  const std::vector<float> got = play_group(ranks, 3, /*add_to_out=*/true);  // no all_reduce set
  EXPECT_EQ(got, (std::vector<float>{12, 15, 18}));
  EXPECT_EQ(ranks[0].all_reduce_calls, 0);
}

TEST(Task5RowParallel, BadGroupsAreRefused) {
  float buf[2] = {0, 0};
  const PartialProduct partial = [](float*, bool) {};
  TpGroup no_sum;
  no_sum.size = 2;  // two ranks, nothing to sum with
  EXPECT_THROW(row_parallel_linear(partial, buf, 2, true, no_sum), InvalidArgument);
  TpGroup outside;
  outside.rank = 3;
  outside.size = 2;
  outside.all_reduce = [](float*, int64_t) {};
  EXPECT_THROW(row_parallel_linear(partial, buf, 2, true, outside), InvalidArgument);
  EXPECT_THROW(row_parallel_linear(partial, buf, -1, true, TpGroup{}), InvalidArgument);
}

// ---- localize_vocab_ids -------------------------------------------------------------------

TEST(Task5VocabIds, EachIdLandsOnTheOneRankThatHoldsIt) {
  const std::vector<int32_t> ids{0, 4, 5, 9, 10, 12, 264, 3};
  const int64_t vocab = 265, tp = 3, local = (vocab + tp - 1) / tp;  // 89: the last shard padded
  std::vector<int> holders(ids.size(), 0);
  for (int64_t r = 0; r < tp; ++r) {
    std::vector<int32_t> mine = ids;
    localize_vocab_ids(mine, r * local, local);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (mine[i] == -1) continue;
      ++holders[i];
      EXPECT_EQ(mine[i] + r * local, ids[i]) << "rank " << r << " maps id " << ids[i] << " to " << mine[i];
      EXPECT_TRUE(mine[i] >= 0 && mine[i] < local) << "rank " << r << ", id " << ids[i];
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(holders[i], 1) << "id " << ids[i];
  std::vector<int32_t> one{7};
  EXPECT_THROW(localize_vocab_ids(one, -1, 4), InvalidArgument);
  EXPECT_THROW(localize_vocab_ids(one, 0, 0), InvalidArgument);
}

// ---- gather_vocab_shards ------------------------------------------------------------------

TEST(Task5GatherVocab, ShardsBackInVocabularyOrderPaddingDropped) {
  for (const auto& [vocab, tp] : {std::pair<int64_t, int64_t>{12, 3}, {10, 4}, {13, 5}, {49152, 5}}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab) + " over " + std::to_string(tp));
    const int64_t rows = 3, local = (vocab + tp - 1) / tp;
    // What rank r's LM head computes for row i, column c (global c = r * local + c): a code
    // that names the entry, NaN on the padding columns, which must never reach `out`.
    std::vector<float> gathered(static_cast<size_t>(tp * rows * local));
    for (int64_t r = 0; r < tp; ++r) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t c = 0; c < local; ++c) {
          const int64_t v = r * local + c;
          gathered[static_cast<size_t>((r * rows + i) * local + c)] =
              v < vocab ? static_cast<float>(i * 100000 + v) : std::nanf("");
        }
      }
    }
    std::vector<float> out(static_cast<size_t>(rows * vocab + 5), -7.0f);  // 5 sentinels past the end
    gather_vocab_shards(gathered, tp, rows, local, vocab, std::span<float>(out.data(), static_cast<size_t>(rows * vocab)));
    int64_t wrong = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t v = 0; v < vocab; ++v) wrong += out[static_cast<size_t>(i * vocab + v)] != static_cast<float>(i * 100000 + v);
    }
    EXPECT_EQ(wrong, 0) << "logits out of vocabulary order";
    for (size_t k = static_cast<size_t>(rows * vocab); k < out.size(); ++k) EXPECT_EQ(out[k], -7.0f) << "wrote past vocab";
  }
  std::vector<float> g(8), o(8);
  EXPECT_THROW(gather_vocab_shards(g, 2, 1, 3, 7, o), InvalidArgument);  // 2 x 3 < 7 entries
  EXPECT_THROW(gather_vocab_shards(g, 0, 1, 3, 3, o), InvalidArgument);
  EXPECT_THROW(gather_vocab_shards(g, 2, 2, 4, 8, o), InvalidArgument);  // gathered needs 16 floats
}

// ---- the engine on the learner's Task 5 ---------------------------------------------------

LoadedModel tiny_model(testing::TinyModelSpec spec, const std::string& name) {
  const std::string dir = testing::make_temp_dir("lio_ch08_t5");
  const std::string path = dir + "/" + name + ".gguf";
  testing::write_tiny_gguf(path, spec);
  LoadedModel m = load_model(path, WeightMode::AsStored);
  std::filesystem::remove_all(dir);
  return m;
}

/// Two prompts (every row's logits), then three decode steps of both in one batch, on `runner`.
std::vector<float> run_workload(ModelRunner& runner, int64_t vocab) {
  const int64_t bs = runner.kv_pool().block_size();
  const std::vector<int32_t> a{5, 9, 200, 31, 77, 4, 18}, b{static_cast<int32_t>(vocab - 1), 3, 99, 42, 12};
  const std::vector<int32_t> table_a{0, 1, 2, 3}, table_b{4, 5, 6, 7};
  std::vector<float> out;
  auto keep = [&](std::span<const float> l) { out.insert(out.end(), l.begin(), l.end()); };
  ForwardBatch first(bs);
  first.add_sequence(a, 0, table_a, static_cast<int64_t>(a.size()));
  keep(runner.forward(first));
  ForwardBatch second(bs);
  second.add_sequence(b, 0, table_b, static_cast<int64_t>(b.size()));
  keep(runner.forward(second));
  auto pos_a = static_cast<int64_t>(a.size()), pos_b = static_cast<int64_t>(b.size());
  for (int32_t step = 0; step < 3; ++step) {
    ForwardBatch decode(bs);
    decode.add_sequence(std::vector<int32_t>{static_cast<int32_t>(7 + step)}, pos_a++, table_a);
    decode.add_sequence(std::vector<int32_t>{static_cast<int32_t>(vocab - 2 - step)}, pos_b++, table_b);
    keep(runner.forward(decode));
  }
  return out;
}

/// The model at TP = world size against one rank on rank 0: logits within `tol` of the largest.
void expect_tp_equals_one_rank(const testing::TinyModelSpec& spec, const std::string& name) {
  std::unique_ptr<Communicator> world = world_communicator();
  const int64_t tp = world->size();
  if (tp == 1) GTEST_SKIP() << "runs with 2 ranks (scripts/mpirun.sh -n 2)";
  const LoadedModel model = tiny_model(spec, name);
  const int64_t vocab = model.config.vocab_size;
  const KvPoolOptions kv{4, 8, KvCacheDType::F32};
  std::unique_ptr<ModelRunner> runner = make_parallel_runner(model, ParallelConfig{tp, 1}, std::move(world),
                                                             Device::Cpu, kv, ActivationPrecision::F32,
                                                             AttentionBackend::Flash);
  if (!runner->is_driver()) {
    runner->serve_worker();
    return;
  }
  std::unique_ptr<ModelRunner> single = make_runner(model, Device::Cpu, kv, ActivationPrecision::F32);
  const std::vector<float> want = run_workload(*single, vocab);
  const std::vector<float> got = run_workload(*runner, vocab);
  runner->stop_workers();
  ASSERT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  EXPECT_LE(diff, 1e-5 * scale) << "TP logits differ from one rank's by " << diff << " (largest logit " << scale << ")";
}

testing::TinyModelSpec spec_for(const std::string& arch) {
  testing::TinyModelSpec s;
  s.architecture = arch;
  s.n_layers = arch == "gemma3" ? 6 : 2;
  s.sliding_window = 4;
  s.d_model = 64;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.d_ff = 128;
  s.merges.push_back("a n");  // 265 tokens: the last vocabulary shard is padded at TP 2
  return s;
}

// Qwen 3: two all-reduces per layer into the residual stream (o_proj, down). (A llama rank runs
// Task 6's layer instead, graded by ch08_task_6_tp_decoder_layer.)
TEST(Task5Engine, Qwen3AtTpEqualsOneRank) { expect_tp_equals_one_rank(spec_for("qwen3"), "qwen3"); }

// Gemma 3: the all-reduced sum is post-normed before the residual add.
TEST(Task5Engine, Gemma3AtTpEqualsOneRank) { expect_tp_equals_one_rank(spec_for("gemma3"), "gemma3"); }

}  // namespace
}  // namespace lio
