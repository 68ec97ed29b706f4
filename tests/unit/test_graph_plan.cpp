// CUDA-graph buckets and decode-batch padding (lio/cuda_graph_plan.h), on the host: the sizes,
// the bucket a batch goes to, which batches a decode graph replays, and that padding a batch
// changes nothing of its real rows (checked bitwise through the CPU forward pass).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/cuda_graph_plan.h"
#include "lio/error.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace {

TEST(GraphPlan, CaptureSizesCoverEveryBatchUpToMaxNumSeqs) {
  EXPECT_EQ(lio::graph_capture_sizes(64), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48, 64}));
  EXPECT_EQ(lio::graph_capture_sizes(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(lio::graph_capture_sizes(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(lio::graph_capture_sizes(100), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 100}));
  EXPECT_THROW(lio::graph_capture_sizes(0), lio::InvalidArgument);
}

TEST(GraphPlan, ABatchGoesToTheSmallestBucketThatHoldsIt) {
  const std::vector<int64_t> sizes = lio::graph_capture_sizes(64);
  EXPECT_EQ(lio::graph_bucket(sizes, 1), 1);
  EXPECT_EQ(lio::graph_bucket(sizes, 3), 4);
  EXPECT_EQ(lio::graph_bucket(sizes, 9), 16);
  EXPECT_EQ(lio::graph_bucket(sizes, 33), 48);
  EXPECT_EQ(lio::graph_bucket(sizes, 64), 64);
  EXPECT_EQ(lio::graph_bucket(sizes, 65), -1);  // past the largest: eager
  EXPECT_THROW(lio::graph_bucket(sizes, 0), lio::InvalidArgument);
}

TEST(GraphPlan, OnlyPlainDecodeBatchesAreReplayed) {
  const std::vector<int32_t> table = {0, 1};
  const std::vector<int32_t> one = {7}, two = {7, 8};
  lio::ForwardBatch decode(16);
  decode.add_sequence(one, 5, table);
  decode.add_sequence(one, 9, table);
  EXPECT_TRUE(lio::is_graph_decode_batch(decode));
  lio::ForwardBatch prefill(16);
  prefill.add_sequence(two, 0, table);
  EXPECT_FALSE(lio::is_graph_decode_batch(prefill));
  lio::ForwardBatch verify(16);  // speculative verification: k + 1 rows with logits
  verify.add_sequence(two, 5, table, 2);
  EXPECT_FALSE(lio::is_graph_decode_batch(verify));
  lio::ForwardBatch early = decode;
  early.n_layers = 1;
  EXPECT_FALSE(lio::is_graph_decode_batch(early));
  lio::ForwardBatch hidden = decode;  // hidden states wanted (a Medusa step): runs eagerly
  hidden.return_hidden = true;
  EXPECT_FALSE(lio::is_graph_decode_batch(hidden));
  EXPECT_FALSE(lio::is_graph_decode_batch(lio::ForwardBatch(16)));
  EXPECT_THROW(lio::pad_decode_batch(prefill, 4), lio::InvalidArgument);
  EXPECT_THROW(lio::pad_decode_batch(decode, 1), lio::InvalidArgument);
}

// Three sequences decode one token each, alone and padded to buckets of 4 and 8: the padding
// adds rows that write no K/V and get no logits, and the real rows' logits keep their bits.
TEST(GraphPlan, PaddingLeavesTheRealRowsBitwiseUnchanged) {
  const std::string dir = lio::testing::make_temp_dir("lio_graph_plan");
  lio::testing::TinyModelSpec spec;
  lio::testing::write_tiny_gguf(dir + "/m.gguf", spec);
  const lio::LoadedModel m = lio::load_model(dir + "/m.gguf", lio::WeightMode::AsStored);
  lio::ModelRunner runner(std::make_unique<lio::CpuBackend>(m.config, m.weights), lio::KvPoolConfig{16, 16});
  // Prefill three prompts of 5, 9 and 12 tokens into blocks 1, 2 and 3 (block 0 stays for pads).
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 17, 200, 3, 99}, {140, 7, 250, 33, 61, 12, 180, 9, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  lio::ForwardBatch prefill(16);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const std::vector<int32_t> table = {static_cast<int32_t>(s + 1)};
    prefill.add_sequence(prompts[s], 0, table);
  }
  runner.forward(prefill);
  const auto decode_batch = [&] {
    lio::ForwardBatch b(16);
    for (size_t s = 0; s < prompts.size(); ++s) {
      const std::vector<int32_t> table = {static_cast<int32_t>(s + 1)};
      const int32_t next = 42 + static_cast<int32_t>(s);
      b.add_sequence(std::span(&next, 1), static_cast<int64_t>(prompts[s].size()), table);
    }
    return b;
  };
  const lio::ForwardBatch plain = decode_batch();
  const std::span<const float> l0 = runner.forward(plain);
  const std::vector<float> want(l0.begin(), l0.end());
  ASSERT_EQ(static_cast<int64_t>(want.size()), 3 * m.config.vocab_size);
  for (int64_t bucket : {4, 8}) {
    lio::ForwardBatch padded = decode_batch();
    lio::pad_decode_batch(padded, bucket);
    EXPECT_EQ(padded.n_seqs(), bucket);
    EXPECT_EQ(padded.n_logits(), 3);
    for (int64_t row = 3; row < bucket; ++row) EXPECT_EQ(padded.slot_mapping[static_cast<size_t>(row)], lio::kPadSlotId);
    const std::span<const float> got = runner.forward(padded);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "bucket " << bucket << " at " << i;
    // What a graph replays: every row gets logits, block tables 5 columns wide. The real rows'
    // logits are the first three rows, bitwise.
    const lio::ForwardBatch graph = lio::graph_decode_batch(decode_batch(), bucket, 5);
    EXPECT_EQ(graph.n_logits(), bucket);
    EXPECT_EQ(graph.max_blocks_per_seq, 5);
    for (int64_t s = 0; s < 3; ++s) {
      EXPECT_EQ(graph.block_tables[static_cast<size_t>(s * 5)], s + 1);
      EXPECT_EQ(graph.block_tables[static_cast<size_t>(s * 5 + 1)], 0);
    }
    const std::span<const float> all = runner.forward(graph);
    ASSERT_EQ(static_cast<int64_t>(all.size()), bucket * m.config.vocab_size);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(all[i], want[i]) << "graph bucket " << bucket << " at " << i;
  }
  EXPECT_THROW(lio::graph_decode_batch(decode_batch(), 4, 0), lio::InvalidArgument);  // narrower than the batch
}

// A graph is captured once per bucket and replayed with every batch of that bucket: the capture
// batch and every replayed batch must have the same array shapes (the replay checks them and
// runs eagerly otherwise, so a difference here would silently turn graphs off).
TEST(GraphPlan, EveryBatchOfABucketHasTheCaptureBatchsShapes) {
  const auto shapes = [](const lio::ForwardBatch& b) {
    std::vector<size_t> out = {b.token_ids.size(), b.positions.size(), b.slot_mapping.size(),
                               b.query_start_loc.size(), b.seq_lens.size(), b.block_tables.size(),
                               b.logits_rows.size(), b.group_slot_mapping.size()};
    for (size_t g = 0; g < b.group_slot_mapping.size(); ++g) {
      out.push_back(b.group_slot_mapping[g].size());
      out.push_back(b.group_block_tables[g].size());
    }
    out.push_back(static_cast<size_t>(b.max_blocks_per_seq));
    return out;
  };
  for (int64_t groups : {1, 2}) {
    const lio::ForwardBatch capture = lio::graph_capture_batch(8, 6, 16, groups);
    EXPECT_TRUE(lio::is_graph_decode_batch(capture));
    EXPECT_EQ(capture.n_seqs(), 8);
    EXPECT_EQ(capture.n_logits(), 8);
    for (int32_t slot : capture.slot_mapping) EXPECT_EQ(slot, lio::kPadSlotId);  // capturing runs nothing, but no K/V either way
    for (int64_t n : {1, 5, 8}) {
      lio::ForwardBatch b(16);
      for (int64_t s = 0; s < n; ++s) {
        const int32_t token = 3;
        const int64_t pos = 10 * s + 7;  // 1 .. 5 blocks
        std::vector<int32_t> table(static_cast<size_t>(pos / 16 + 1));
        for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(1 + s * 6 + static_cast<int64_t>(i));
        const std::vector<std::vector<int32_t>> tables(static_cast<size_t>(groups), table);
        b.add_sequence(std::span(&token, 1), pos, tables, 1, true);
      }
      EXPECT_EQ(shapes(lio::graph_decode_batch(b, 8, 6)), shapes(capture)) << n << " sequences, " << groups << " groups";
    }
  }
  EXPECT_THROW(lio::graph_capture_batch(0, 6, 16, 1), lio::InvalidArgument);
  EXPECT_THROW(lio::graph_capture_batch(8, 6, 16, 0), lio::InvalidArgument);
}

}  // namespace
