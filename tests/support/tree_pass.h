// tree_pass.h — the model-level check of tree verification (issue 63, item 4), shared by the CPU
// test (test_tree_verify.cpp) and its CUDA twin (test_cuda_runner_tree.cpp): a draft tree run as
// ONE forward pass with ForwardBatch::set_tree gives each node the logits of running its
// root-to-node path as a plain chain after the same prefix in a fresh pool (SpecInfer, Miao et
// al. 2024, sec. 4; Medusa, Cai et al. 2024, sec. 2.1.2).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "lio/backend.h"
#include "lio/forward_batch.h"
#include "lio/kv_pool.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "tiny_model.h"

namespace lio::testing {

/// One sequence of the tree pass: `prefix` tokens computed first, then `plain` ordinary tokens
/// and a tree of `parents.size()` nodes (parents[0] = -1, parents[i] < i) holding `tree_tokens`,
/// all in one pass.
struct TreeSeq {
  std::vector<int32_t> prefix, plain, tree_tokens;
  std::vector<int> parents;
};

/// n token ids from a seed, inside a tiny model's vocabulary (3 .. 252).
inline std::vector<int32_t> tree_test_tokens(int n, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + seed * 11 + 5) % 250 + 3));
  return t;
}

/// Three sequences of the checks: a 7-node branching tree after `prefix` tokens, a 4-node chain
/// after prefix + 9 tokens and two plain ones, and a tree of `third` (parents) after prefix + 1.
inline std::vector<TreeSeq> three_test_trees(int prefix, const std::vector<int>& third) {
  return {TreeSeq{tree_test_tokens(prefix, 1), {}, tree_test_tokens(7, 2), {-1, 0, 0, 1, 1, 2, 5}},
          TreeSeq{tree_test_tokens(prefix + 9, 3), tree_test_tokens(2, 4), tree_test_tokens(4, 5), {-1, 0, 1, 2}},
          TreeSeq{tree_test_tokens(prefix + 1, 6), {}, tree_test_tokens(static_cast<int>(third.size()), 7), third}};
}

/// Tree masks from parent indices: bit j of mask i iff node j is node i or an ancestor.
inline std::vector<uint64_t> tree_masks_of(const std::vector<int>& parents) {
  std::vector<uint64_t> m(parents.size());
  for (size_t i = 0; i < parents.size(); ++i)
    m[i] = (uint64_t{1} << i) | (parents[i] < 0 ? 0 : m[static_cast<size_t>(parents[i])]);
  return m;
}

/// Runs `seqs` (each in blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq) of a pool of
/// `block_size`-token blocks, in each KV cache group of the pool: groups.size() x seqs.size() x
/// blocks_per_seq blocks) on runners made by `make`: the prefixes in one pass, then every
/// sequence's plain tokens and tree in ONE pass, logits for the tree rows. Each node's logits row
/// must equal, within rel_tol relative to the row's largest logit (at least 1), the last row of a
/// fresh runner fed the prefix, then plain + the node's path as one chunk. `what` names the case.
inline void expect_tree_pass_equals_path_chains(const std::function<std::unique_ptr<ModelRunner>()>& make,
                                                const std::vector<TreeSeq>& seqs, int64_t block_size,
                                                int64_t blocks_per_seq, const std::string& what,
                                                double rel_tol = 1e-4) {
  std::unique_ptr<ModelRunner> runner = make();
  // Sequence s's table in KV cache group g (a hybrid pool has several): blocks_per_seq blocks
  // from (g * seqs.size() + s) * blocks_per_seq.
  const int64_t n_groups = runner->kv_pool().n_groups();
  const auto table_of = [&](size_t s) {
    std::vector<std::vector<int32_t>> tables;
    for (int64_t g = 0; g < n_groups; ++g) {
      std::vector<int32_t> t(static_cast<size_t>(blocks_per_seq));
      std::iota(t.begin(), t.end(), static_cast<int32_t>((static_cast<size_t>(g) * seqs.size() + s) * static_cast<size_t>(blocks_per_seq)));
      tables.push_back(std::move(t));
    }
    return tables;
  };
  ForwardBatch prefill(block_size), tree(block_size);
  for (size_t s = 0; s < seqs.size(); ++s) prefill.add_sequence(seqs[s].prefix, 0, table_of(s), 1);
  runner->forward(prefill);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<int32_t> rows = seqs[s].plain;
    rows.insert(rows.end(), seqs[s].tree_tokens.begin(), seqs[s].tree_tokens.end());
    tree.add_sequence(rows, std::ssize(seqs[s].prefix), table_of(s), std::ssize(seqs[s].tree_tokens));
  }
  for (size_t s = 0; s < seqs.size(); ++s) tree.set_tree(static_cast<int64_t>(s), tree_masks_of(seqs[s].parents));
  const std::span<const float> out = runner->forward(tree);
  const std::vector<float> got(out.begin(), out.end());
  const int64_t vocab = runner->config().vocab_size;
  ASSERT_EQ(std::ssize(got), tree.n_logits() * vocab) << what;
  int64_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (size_t i = 0; i < seqs[s].parents.size(); ++i, ++row) {
      std::vector<int32_t> chain = seqs[s].plain;
      std::vector<int32_t> path;
      for (int a = static_cast<int>(i); a >= 0; a = seqs[s].parents[static_cast<size_t>(a)])
        path.insert(path.begin(), seqs[s].tree_tokens[static_cast<size_t>(a)]);
      chain.insert(chain.end(), path.begin(), path.end());
      std::unique_ptr<ModelRunner> fresh = make();
      ForwardBatch a(block_size), b(block_size);
      a.add_sequence(seqs[s].prefix, 0, table_of(0), 1);
      fresh->forward(a);
      b.add_sequence(chain, std::ssize(seqs[s].prefix), table_of(0), 1);
      const std::span<const float> want = fresh->forward(b);
      double scale = 1.0, diff = 0.0;
      for (int64_t v = 0; v < vocab; ++v) {
        scale = std::max(scale, std::fabs(double(want[static_cast<size_t>(v)])));
        diff = std::max(diff, std::fabs(double(got[static_cast<size_t>(row * vocab + v)]) - want[static_cast<size_t>(v)]));
      }
      EXPECT_LE(diff, rel_tol * scale) << what << ": sequence " << s << " node " << i;
    }
  }
}

/// `spec` written as `dir`/`name`.gguf and loaded as stored.
inline LoadedModel load_tiny_tree_model(const std::string& dir, const TinyModelSpec& spec, const std::string& name) {
  write_tiny_gguf(dir + "/" + name + ".gguf", spec);
  return load_model(dir + "/" + name + ".gguf", WeightMode::AsStored);
}

/// expect_tree_pass_equals_path_chains on `device` for every attention backend (flash, naive,
/// paged) x `dtypes` (a quantized pool once, with flash: the backend then picks its kernel) x
/// `prefixes`, on three_test_trees(prefix, third), pools of 3 x 8 blocks of 16 tokens per KV cache
/// group (`hybrid`: the model's full and windowed layers in groups of their own); f16 / int8
/// pools within 2e-3; the CPU's flash kernel bitwise.
inline void expect_tree_pass_on_every_backend(const LoadedModel& m, Device device, const std::vector<KvCacheDType>& dtypes,
                                              const std::vector<int>& prefixes, const std::vector<int>& third,
                                              const std::string& name, bool hybrid = false) {
  const int64_t n_groups = kv_cache_groups(m.config, hybrid).n_groups();
  for (const auto attention : {AttentionBackend::Flash, AttentionBackend::Naive, AttentionBackend::Paged}) {
    for (const KvCacheDType dtype : dtypes) {
      if (dtype != KvCacheDType::F32 && attention != AttentionBackend::Flash) continue;
      for (const int prefix : prefixes) {
        const auto make = [&] {
          return std::make_unique<ModelRunner>(make_backend(m, device, ActivationPrecision::F32, attention),
                                               KvPoolConfig{16, n_groups * 3 * 8, dtype, hybrid});
        };
        expect_tree_pass_equals_path_chains(make, three_test_trees(prefix, third), 16, 8,
                                            name + " " + attention_backend_name(attention) + " " +
                                                kv_cache_dtype_name(dtype) + " prefix " + std::to_string(prefix),
                                            // The CPU's flash kernel folds a node's keys as its
                                            // chain's last row would: bitwise (greedy speculation
                                            // then gives plain greedy's text exactly).
                                            device == Device::Cpu && attention == AttentionBackend::Flash ? 0.0
                                            : dtype == KvCacheDType::F32                                ? 1e-4
                                                                                                         : 2e-3);
      }
    }
  }
}

}  // namespace lio::testing
