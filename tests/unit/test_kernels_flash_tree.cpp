// Tree verification in chapter 07's CPU kernels (AttentionBatch::tree_masks / tree_lens; issue
// 63, item 4): cpu::flash_attention and cpu::naive_attention against a reference written from
// the definition — a tree node attends exactly as the chain of its root-to-node path would, after
// the same prefix (SpecInfer, Miao et al. 2024, sec. 4; Medusa, Cai et al. 2024, sec. 2.1.2).
// One batch mixes a prefill, a decode row, a chain tree after two ordinary rows and a branching
// tree of 7 nodes, at prefixes that put the tree across a 64-key tile and a 512-key split, with
// and without a sliding window (measured from each node's real position), on f32, f16 and int8
// pools. Tolerance as test_kernels_flash_attention: 2e-5 absolute on O(1) outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "flash_attention.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "paged_layout.h"

namespace {

constexpr float kTol = 2e-5f;  // absolute, on outputs of O(1)

using lio::cpu::AttentionBatch;
using lio::cpu::AttentionShape;
using lio::cpu::PagedKvLayer;
using lio::cpu::KvElement;

/// Tree masks from parent indices (parents[0] = -1): bit j of mask i iff j is i or an ancestor.
std::vector<uint64_t> masks_of(const std::vector<int>& parents) {
  std::vector<uint64_t> m(parents.size());
  for (size_t i = 0; i < parents.size(); ++i)
    m[i] = (uint64_t{1} << i) | (parents[i] < 0 ? 0 : m[static_cast<size_t>(parents[i])]);
  return m;
}

/// A sequence of the batch: `cached` keys, then `plain` ordinary rows, then a tree (`parents`,
/// possibly empty).
struct SeqDef {
  int64_t cached, plain;
  std::vector<int> parents;
};

/// A random batch in a scattered paged pool (as test_kernels_flash_attention's Case), with the
/// tree arrays filled in.
struct TreeCase {
  AttentionShape shape;
  std::vector<SeqDef> defs;
  std::vector<int32_t> qsl, seq_lens, tables, tree_lens;
  std::vector<uint64_t> tree_masks;
  int64_t max_blocks = 0, n_tokens = 0, n_slots = 0, block_size = 16;
  std::vector<float> q, k, v;

  TreeCase(std::vector<SeqDef> d, int64_t window, uint32_t seed) : defs(std::move(d)) {
    shape = AttentionShape{6, 2, 64, 1.0f / 8.0f};
    shape.window = window;
    std::vector<lio::testing::SeqSpec> specs;
    for (const SeqDef& s : defs)
      specs.push_back({static_cast<int32_t>(s.cached), static_cast<int32_t>(s.plain + std::ssize(s.parents))});
    const lio::testing::PagedLayout l = lio::testing::scattered_layout(specs, block_size, seed);
    qsl = l.query_start_loc, seq_lens = l.seq_lens, tables = l.block_tables;
    max_blocks = l.max_blocks_per_seq, n_tokens = l.n_tokens, n_slots = l.n_slots;
    tree_masks.assign(static_cast<size_t>(n_tokens), 0);
    for (size_t s = 0; s < defs.size(); ++s) {
      const std::vector<uint64_t> m = masks_of(defs[s].parents);
      tree_lens.push_back(static_cast<int32_t>(m.size()));
      std::copy(m.begin(), m.end(), tree_masks.begin() + (qsl[s + 1] - std::ssize(m)));
    }
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    k.resize(static_cast<size_t>(n_slots * shape.n_kv_heads * shape.head_dim));
    v.resize(k.size());
    q.resize(static_cast<size_t>(n_tokens * shape.n_heads * shape.head_dim));
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    for (float& x : q) x = 2.0f * u(rng);
  }
  AttentionBatch batch() const {
    return AttentionBatch{qsl.data(), seq_lens.data(), tables.data(), std::ssize(defs), max_blocks, block_size, true,
                          tree_lens.data(), tree_masks.data()};
  }
  int64_t slot(size_t s, int64_t j) const {
    return int64_t{tables[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(j / block_size)]} * block_size +
           j % block_size;
  }
};

/// The definition, in double: each row attends as the last row of a chain would. A plain row at
/// position p sees keys 0 .. p; tree node t sees the prefix 0 .. key0 - 1 and then its path's
/// nodes (root .. t, each at real position key0 + its depth). A window keeps the keys whose real
/// position is > (the row's real position) - window. Shares no code with the kernels.
std::vector<float> reference(const TreeCase& c, const std::vector<float>& k, const std::vector<float>& v) {
  const AttentionShape& sh = c.shape;
  const int64_t d = sh.head_dim, group = sh.n_heads / sh.n_kv_heads, kvd = sh.n_kv_heads * d;
  std::vector<float> out(c.q.size(), 0.0f);
  for (size_t s = 0; s < c.defs.size(); ++s) {
    const int64_t q0 = c.qsl[s], qlen = c.qsl[s + 1] - q0, n_tree = std::ssize(c.defs[s].parents);
    const int64_t key0 = c.seq_lens[s] - n_tree;
    for (int64_t i = 0; i < qlen; ++i) {
      // (key index, real position) of the chain this row is the end of.
      std::vector<std::pair<int64_t, int64_t>> keys;
      int64_t pos = 0;
      const int64_t t = i - (qlen - n_tree);
      if (t < 0) {
        pos = c.seq_lens[s] - qlen + i;
        for (int64_t j = 0; j <= pos; ++j) keys.emplace_back(j, j);
      } else {
        std::vector<int64_t> path;
        for (int64_t a = t; a >= 0; a = c.defs[s].parents[static_cast<size_t>(a)]) path.insert(path.begin(), a);
        pos = key0 + std::ssize(path) - 1;
        for (int64_t j = 0; j < key0; ++j) keys.emplace_back(j, j);
        for (size_t depth = 0; depth < path.size(); ++depth) keys.emplace_back(key0 + path[depth], key0 + static_cast<int64_t>(depth));
      }
      if (sh.window > 0) std::erase_if(keys, [&](const auto& kp) { return kp.second <= pos - sh.window; });
      for (int64_t h = 0; h < sh.n_heads; ++h) {
        const float* qv = c.q.data() + ((q0 + i) * sh.n_heads + h) * d;
        std::vector<double> w;
        double mx = -INFINITY;
        for (const auto& [j, p] : keys) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += double(qv[e]) * k[c.slot(s, j) * kvd + (h / group) * d + e];
          w.push_back(dot * sh.scale);
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        float* o = out.data() + ((q0 + i) * sh.n_heads + h) * d;
        for (size_t n = 0; n < keys.size(); ++n)
          for (int64_t e = 0; e < d; ++e) o[e] += float(w[n] / sum * v[c.slot(s, keys[n].first) * kvd + (h / group) * d + e]);
      }
    }
  }
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

const std::vector<int> kChain = {-1, 0, 1, 2, 3};
const std::vector<int> kBranching = {-1, 0, 0, 1, 1, 2, 5};  // depths 0 1 1 2 2 2 3

// Every row of a mixed batch, trees at prefixes around a key tile (64) and a split (512), with
// windows that cut into the prefix (20, 64) and into the path itself (2, 3): flash split and one
// pass, and the naive twin, against the chain definition.
TEST(TreeAttention, FlashAndNaiveEqualTheChainOfEachNodesPath) {
  for (const int64_t prefix : {0, 1, 60, 62, 100, 509, 1000}) {
    for (const int64_t window : {0, 2, 3, 20, 64}) {
      const TreeCase c({{0, 37, {}}, {prefix + 3, 1, {}}, {prefix, 2, kChain}, {prefix + 2, 0, kBranching}}, window,
                       static_cast<uint32_t>(prefix * 7 + window));
      const std::string at = "prefix " + std::to_string(prefix) + " window " + std::to_string(window);
      const std::vector<float> want = reference(c, c.k, c.v);
      const PagedKvLayer kv{KvElement::F32, c.k.data(), c.v.data(), nullptr, nullptr};
      for (const bool split : {true, false}) {
        std::vector<float> out(c.q.size(), NAN);
        lio::cpu::FlashWorkspace ws;
        lio::cpu::flash_attention(c.q.data(), kv, out.data(), nullptr, c.batch(), c.shape, ws,
                                  lio::cpu::FlashOptions{split});
        EXPECT_LT(max_abs_diff(out, want), kTol) << at << (split ? " split" : " one pass");
      }
      std::vector<float> out(c.q.size(), NAN), scores;
      lio::cpu::naive_attention(c.q.data(), kv, out.data(), nullptr, c.batch(), c.shape, scores);
      EXPECT_LT(max_abs_diff(out, want), kTol) << at << " naive";
    }
  }
}

// The mask matters: the same batch without its tree arrays (every row causal on its linear
// position) differs from the definition on the branching tree's rows.
TEST(TreeAttention, WithoutTheMaskTheBranchesLeakIntoEachOther) {
  const TreeCase c({{70, 0, kBranching}}, 0, 5);
  AttentionBatch plain = c.batch();
  plain.tree_lens = nullptr, plain.tree_masks = nullptr;
  std::vector<float> out(c.q.size()), scores;
  lio::cpu::FlashWorkspace ws;
  lio::cpu::flash_attention(c.q.data(), PagedKvLayer{KvElement::F32, c.k.data(), c.v.data(), nullptr, nullptr},
                            out.data(), nullptr, plain, c.shape, ws);
  EXPECT_GT(max_abs_diff(out, reference(c, c.k, c.v)), 100 * kTol);
}

// f16 and int8 pools: each kernel equals the definition over the pool's dequantized values.
TEST(TreeAttention, F16AndInt8PoolsEqualTheDefinitionOverTheirValues) {
  for (const int64_t window : {0, 3}) {
    const TreeCase c({{0, 20, {}}, {63, 1, kChain}, {510, 0, kBranching}}, window, 17);
    const int64_t kvh = c.shape.n_kv_heads;
    std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
    std::vector<int8_t> k8(c.k.size()), v8(c.v.size());
    std::vector<float> ks(static_cast<size_t>(c.n_slots * kvh), 1.0f / 127), vs(ks.size(), 1.0f / 127);
    std::vector<float> k16f(c.k.size()), v16f(c.v.size()), k8f(c.k.size()), v8f(c.v.size());
    for (size_t i = 0; i < c.k.size(); ++i) {
      k16[i] = lio::f32_to_f16(c.k[i]), v16[i] = lio::f32_to_f16(c.v[i]);
      k16f[i] = lio::f16_to_f32(k16[i]), v16f[i] = lio::f16_to_f32(v16[i]);
      k8[i] = static_cast<int8_t>(std::lround(c.k[i] * 127)), v8[i] = static_cast<int8_t>(std::lround(c.v[i] * 127));
      k8f[i] = (1.0f / 127) * static_cast<float>(k8[i]), v8f[i] = (1.0f / 127) * static_cast<float>(v8[i]);
    }
    const PagedKvLayer f16{KvElement::F16, k16.data(), v16.data(), nullptr, nullptr};
    const PagedKvLayer i8{KvElement::Int8, k8.data(), v8.data(), ks.data(), vs.data()};
    const std::vector<float> want16 = reference(c, k16f, v16f), want8 = reference(c, k8f, v8f);
    for (const auto& [kv, want, name] : {std::tuple{f16, want16, "f16"}, std::tuple{i8, want8, "int8"}}) {
      std::vector<float> out(c.q.size(), NAN), scores;
      lio::cpu::FlashWorkspace ws;
      lio::cpu::flash_attention(c.q.data(), kv, out.data(), nullptr, c.batch(), c.shape, ws);
      EXPECT_LT(max_abs_diff(out, want), kTol) << name << " flash, window " << window;
      lio::cpu::naive_attention(c.q.data(), kv, out.data(), nullptr, c.batch(), c.shape, scores);
      EXPECT_LT(max_abs_diff(out, want), kTol) << name << " naive, window " << window;
    }
  }
}

// A tree longer than its sequence's rows, above 64 nodes, without masks, or on non-causal
// attention is refused by both kernels.
TEST(TreeAttention, BadTreeArraysAreRefused) {
  const TreeCase c({{10, 0, kChain}}, 0, 3);
  const PagedKvLayer kv{KvElement::F32, c.k.data(), c.v.data(), nullptr, nullptr};
  std::vector<float> out(c.q.size()), scores;
  lio::cpu::FlashWorkspace ws;
  std::vector<int32_t> too_long = {6};
  for (int bad = 0; bad < 3; ++bad) {
    AttentionBatch b = c.batch();
    if (bad == 0) b.tree_lens = too_long.data();
    if (bad == 1) b.tree_masks = nullptr;
    if (bad == 2) b.causal = false;
    EXPECT_THROW(lio::cpu::flash_attention(c.q.data(), kv, out.data(), nullptr, b, c.shape, ws), lio::InvalidArgument)
        << bad;
    EXPECT_THROW(lio::cpu::naive_attention(c.q.data(), kv, out.data(), nullptr, b, c.shape, scores),
                 lio::InvalidArgument)
        << bad;
  }
}

}  // namespace
