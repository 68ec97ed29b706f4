// Tree verification in one forward pass (issue 63, item 4; SpecInfer, Miao et al. 2024, sec. 4;
// Medusa, Cai et al. 2024, sec. 2.1.2): ForwardBatch::set_tree's checks and position rewrite,
// and, on tiny random models, every node of a draft tree run in ONE pass gets the logits of its
// root-to-node path run as a plain chain after the same prefix in a fresh pool — for every CPU
// attention backend (flash, naive, paged), on llama and on gemma3, whose windowed layers measure
// the window from a node's real position (its depth), not its row. The CUDA twin is
// test_cuda_runner_tree.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/forward_batch.h"
#include "lio/model_runner.h"
#include "tree_pass.h"

namespace {

using lio::testing::tree_test_tokens;

class TreeVerifyTest : public ::testing::Test {
 protected:
  std::string dir_ = lio::testing::make_temp_dir("lio_test_tree_verify");
};

// Every CPU attention backend, at prefixes that put the tree within and across a 16-row query
// tile and a 64-key tile; the third tree a 6-node bushy one (every node a child of the root but one).
TEST_F(TreeVerifyTest, EachNodeGetsItsPathsLogitsOnEveryCpuAttentionBackend) {
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, lio::testing::TinyModelSpec{}, "llama");
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cpu, {lio::KvCacheDType::F32}, {3, 20, 60, 100},
                                                  {-1, 0, 0, 0, 3, 0}, "llama");
}

// Gemma 3's local layers at a window of 3: the window cuts into the prefix and into the deeper
// nodes' paths, measured from each node's depth.
TEST_F(TreeVerifyTest, SlidingWindowLayersMeasureTheWindowFromTheNodesDepth) {
  lio::testing::TinyModelSpec spec;
  spec.architecture = "gemma3";
  spec.sliding_window = 3;
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, spec, "gemma3");
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cpu, {lio::KvCacheDType::F32}, {3, 20, 60, 100},
                                                  {-1, 0, 0, 0, 3, 0}, "gemma3 window 3");
}

// The hybrid pool (KV cache groups): six gemma3 layers, five windowed (window 3) and one global,
// each kind in its own group with its own block tables.
TEST_F(TreeVerifyTest, HybridPoolGroupsCarryTheTree) {
  lio::testing::TinyModelSpec spec;
  spec.architecture = "gemma3";
  spec.sliding_window = 3;
  spec.n_layers = 6;
  const lio::LoadedModel m = lio::testing::load_tiny_tree_model(dir_, spec, "gemma3_6");
  ASSERT_GT(lio::kv_cache_groups(m.config, true).n_groups(), 1);
  lio::testing::expect_tree_pass_on_every_backend(m, lio::Device::Cpu, {lio::KvCacheDType::F32}, {20, 60},
                                                  {-1, 0, 0, 0, 3, 0}, "gemma3 hybrid", true);
}

// set_tree: RoPE positions become first + depth, slots stay linear, the arrays grow to the batch
// (and with sequences added afterwards); bad masks, sizes and sequences are refused.
TEST(ForwardBatchTree, SetTreeRewritesPositionsAndRefusesBadTrees) {
  const std::vector<int32_t> table = {0, 1, 2, 3};
  lio::ForwardBatch b(16);
  b.add_sequence(tree_test_tokens(3, 1), 10, table, 1);
  b.add_sequence(tree_test_tokens(6, 2), 20, table, 5);
  const std::vector<int32_t> slots_before = b.slot_mapping;
  const std::vector<uint64_t> masks = {1, 3, 5, 11, 0b10011};  // parents -1 0 0 1 1: depths 0 1 1 2 2
  b.set_tree(1, masks);
  EXPECT_EQ(b.positions, (std::vector<int32_t>{10, 11, 12, 20, 21, 22, 22, 23, 23}));
  EXPECT_EQ(b.slot_mapping, slots_before);
  EXPECT_EQ(b.tree_lens, (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(b.tree_masks, (std::vector<uint64_t>{0, 0, 0, 0, 1, 3, 5, 11, 0b10011}));
  EXPECT_NO_THROW(b.validate(300, 256, 4));
  EXPECT_THROW(b.set_tree(1, masks), lio::InvalidArgument);  // already a tree
  b.add_sequence(tree_test_tokens(2, 3), 0, table, 1);
  EXPECT_EQ(b.tree_lens.size(), 3u);
  EXPECT_EQ(b.tree_masks.size(), 11u);
  EXPECT_NO_THROW(b.validate(300, 256, 4));
  const std::vector<std::vector<uint64_t>> bad = {
      {},                   // no node
      {3},                  // the root sees a node after it
      {1, 2},               // node 1 without the root
      {1, 3, 6},            // node 2 = own bit | 2, no node's mask is 2
      {1, 3, 11},           // node 2 with a bit above itself
      {1, 1},               // node 1 without its own bit
  };
  for (const auto& m : bad) EXPECT_THROW(b.set_tree(0, m), lio::InvalidArgument) << m.size();
  EXPECT_THROW(b.set_tree(2, std::vector<uint64_t>{1, 3, 7}), lio::InvalidArgument);  // 3 nodes in 2 rows
  EXPECT_THROW(b.set_tree(3, std::vector<uint64_t>{1}), lio::InvalidArgument);        // no such sequence
  lio::ForwardBatch big(16);
  std::vector<int32_t> big_table(8);
  big.add_sequence(tree_test_tokens(70, 4), 0, big_table, 1);
  std::vector<uint64_t> chain(65);
  for (size_t i = 0; i < chain.size(); ++i) chain[i] = i < 64 ? (uint64_t{1} << i) | (i ? chain[i - 1] : 0) : ~uint64_t{0};
  EXPECT_THROW(big.set_tree(0, chain), lio::InvalidArgument);  // 65 nodes
  chain.pop_back();
  EXPECT_NO_THROW(big.set_tree(0, chain));  // 64: a chain, positions unchanged
  for (int64_t i = 0; i < 70; ++i) EXPECT_EQ(big.positions[static_cast<size_t>(i)], i);
  // validate: a hand-broken tree row or shape.
  lio::ForwardBatch broken = b;
  broken.tree_masks[5] = 4;  // node 1's mask without its own bit
  EXPECT_THROW(broken.validate(300, 256, 4), lio::InvalidArgument);
  broken = b;
  broken.tree_masks.pop_back();
  EXPECT_THROW(broken.validate(300, 256, 4), lio::InvalidArgument);
  broken = b;
  broken.tree_masks[0] = 1;  // a row before the tree with a mask
  EXPECT_THROW(broken.validate(300, 256, 4), lio::InvalidArgument);
}

}  // namespace
