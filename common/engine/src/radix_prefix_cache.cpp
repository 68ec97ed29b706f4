// radix_prefix_cache.cpp — SGLang's RadixAttention prefix cache: a radix tree over token ids.
//
// Zheng et al. 2024, "SGLang: Efficient Execution of Structured Language Model Programs",
// sec. 3 (RadixAttention); python/sglang/srt/mem_cache/radix_cache.py. Our own code, same idea:
// - Every node but the root owns an edge: a run of token ids (`key`) and the KV slot of each
//   token (`slots`, slot = block_id * block_size + position % block_size). Children are keyed by
//   their first token id, so a walk from the root spells out a prompt prefix.
// - The tree holds ONE BlockManager reference per distinct block its slots point into, however
//   many nodes use the block (a node split inside a block leaves both halves using it):
//   `node_count` counts the nodes per block; 0 -> 1 refs the block, 1 -> 0 unrefs it.
// - A block is "held" when its BlockManager count exceeds 1: a sequence besides the tree uses it.
//   Eviction only drops blocks that are not held, least recently used leaf first.
//
// Two refinements over radix_cache.py, both for the engine calling insert() every step:
// - A running sequence that runs past the end of a leaf extends that leaf in place instead of
//   hanging a new child under it, so a long generation stays one node rather than a chain of one
//   node per block.
// - Eviction trims a leaf one block at a time from its end (the deepest tokens go first), so
//   evict(1) — BlockManager::allocate_block's request — frees one block, not a whole
//   conversation, and the unheld tail of a leaf whose head a sequence still uses can go.

#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

namespace {

/// One edge of the tree and the node below it.
struct Node {
  std::vector<int32_t> key;     ///< (n) token ids of the edge
  std::vector<int32_t> slots;   ///< (n) KV slot of each token of `key`
  std::vector<int32_t> blocks;  ///< distinct block ids of `slots`, in position order
  int64_t last_access = 0;      ///< tick of the last match/insert that walked through it
  Node* parent = nullptr;       ///< nullptr for the root
  std::unordered_map<int32_t, std::unique_ptr<Node>> children;  ///< by first token id
  bool pinned = false;  ///< scratch of n_evictable(): its subtree has a held block
};

/// The distinct block ids of `slots` in position order. One node's slots all come from one
/// sequence's block table (or from a leaf extended by a sequence that walked all of it), so each
/// block's slots are contiguous and comparing neighbours is enough.
std::vector<int32_t> blocks_of(std::span<const int32_t> slots, int64_t block_size) {
  std::vector<int32_t> blocks;
  for (const int32_t slot : slots) {
    const auto id = static_cast<int32_t>(slot / block_size);
    if (blocks.empty() || blocks.back() != id) blocks.push_back(id);
  }
  return blocks;
}

}  // namespace

struct RadixPrefixCache::Impl {
  BlockManager& bm;
  int64_t block_size;
  Node root;
  std::vector<int32_t> node_count;  ///< (n_blocks) nodes whose slots point into each block
  int64_t tick = 0;                 ///< bumped by every match() and insert()
  int64_t n_tokens = 0;             ///< tokens stored in the tree
  int64_t n_nodes = 0;              ///< nodes, root excluded

  explicit Impl(BlockManager& blocks)
      : bm(blocks),
        block_size(blocks.block_size()),
        node_count(static_cast<size_t>(blocks.n_blocks()), 0) {}

  // ---- per-block node counts and the tree's BlockManager holds -------------------------------

  /// One more node uses block `id`; the first one takes the tree's hold.
  void add_user(int32_t id) {
    if (node_count[static_cast<size_t>(id)]++ == 0) bm.ref(id);
  }
  /// One node fewer uses block `id`; the last one drops the tree's hold. Returns 1 if the
  /// block became free (no holder left), else 0.
  int64_t drop_user(int32_t id) {
    LIO_CHECK(node_count[static_cast<size_t>(id)] > 0,
              "radix tree: block " + std::to_string(id) + " dropped by a node that did not use it");
    if (--node_count[static_cast<size_t>(id)] > 0) return 0;
    bm.unref(id);
    return bm.ref_count(id) == 0 ? 1 : 0;
  }
  /// True if a sequence besides the tree holds block `id`.
  bool held(int32_t id) const { return bm.ref_count(id) > 1; }

  // ---- tree edits ---------------------------------------------------------------------------

  /// Slot of `position` in `block_table`, checking the id is one of our pool's blocks.
  int32_t slot_at(std::span<const int32_t> block_table, int64_t position) const {
    const int32_t id = block_table[static_cast<size_t>(position / block_size)];
    LIO_CHECK(id >= 0 && id < static_cast<int64_t>(node_count.size()),
              "radix tree: block id " + std::to_string(id) + " out of range");
    return static_cast<int32_t>(id * block_size + position % block_size);
  }

  /// Appends tokens[begin, end) with their slots from `block_table` to `node`'s edge (a new
  /// leaf's or a leaf being extended), registering the blocks they bring.
  void append_edge(Node* node, std::span<const int32_t> tokens, int64_t begin, int64_t end,
                   std::span<const int32_t> block_table) {
    for (int64_t p = begin; p < end; ++p) {
      const int32_t slot = slot_at(block_table, p);
      const auto id = static_cast<int32_t>(slot / block_size);
      node->key.push_back(tokens[static_cast<size_t>(p)]);
      node->slots.push_back(slot);
      if (node->blocks.empty() || node->blocks.back() != id) {
        node->blocks.push_back(id);
        add_user(id);
      }
    }
    n_tokens += end - begin;
  }

  /// Splits `child` after its first `n_head` tokens (0 < n_head < key length): a new node takes
  /// the head and becomes `child`'s parent. Returns the new node.
  Node* split(Node* child, int64_t n_head) {
    Node* parent = child->parent;
    auto head = std::make_unique<Node>();
    head->key.assign(child->key.begin(), child->key.begin() + n_head);
    head->slots.assign(child->slots.begin(), child->slots.begin() + n_head);
    head->blocks = blocks_of(head->slots, block_size);
    head->last_access = child->last_access;
    head->parent = parent;

    child->key.erase(child->key.begin(), child->key.begin() + n_head);
    child->slots.erase(child->slots.begin(), child->slots.begin() + n_head);
    child->blocks = blocks_of(child->slots, block_size);
    child->parent = head.get();
    // A split inside a block leaves that block with one more user; the tree already holds it.
    if (head->blocks.back() == child->blocks.front())
      ++node_count[static_cast<size_t>(head->blocks.back())];

    // Re-hang: parent -> head -> child. Both maps are keyed by the same first token on the
    // parent's side, so only the unique_ptrs move.
    auto& slot_in_parent = parent->children.at(head->key.front());
    std::unique_ptr<Node> owned_child = std::move(slot_in_parent);
    Node* head_raw = head.get();
    head->children.emplace(child->key.front(), std::move(owned_child));
    slot_in_parent = std::move(head);
    ++n_nodes;
    return head_raw;
  }

  /// Drops `leaf`'s last block from its edge: the tokens at its end whose slots lie in that
  /// block. Returns 1 if the block became free, else 0 (another node still uses it).
  int64_t trim_last_block(Node* leaf) {
    const int32_t id = leaf->blocks.back();
    size_t keep = leaf->slots.size();
    while (keep > 0 && leaf->slots[keep - 1] / block_size == id) --keep;
    n_tokens -= static_cast<int64_t>(leaf->slots.size() - keep);
    leaf->key.resize(keep);
    leaf->slots.resize(keep);
    leaf->blocks.pop_back();
    return drop_user(id);
  }

  /// Removes `leaf` (no children, empty edge) from its parent.
  void remove_empty_leaf(Node* leaf, int32_t first_token) {
    LIO_CHECK(leaf->children.empty() && leaf->key.empty(), "radix tree: removing a non-empty node");
    leaf->parent->children.erase(first_token);
    --n_nodes;
  }

  /// True if evict() may trim `node` now: a leaf (not the root) whose last block only the tree
  /// holds.
  bool trimmable(const Node* node) const {
    return node != &root && node->children.empty() && !held(node->blocks.back());
  }

  // ---- a sliding-window group's tree: tombstones (SGLang's SWARadixCache) ------------------
  // A windowed group's query sees only its window, so a block anywhere in an edge may go (its
  // slots then name the null block), not only a leaf's tail. Tombstones stay a prefix of each
  // edge: the first real block of an edge is the one that goes.

  /// The null block's id when this tree serves a sliding-window group, else -1 (no tombstones).
  int32_t null_block = -1;

  /// `node`'s first block that is not the null block, or -1.
  int32_t first_real(const Node* node) const {
    for (const int32_t b : node->blocks)
      if (b != null_block) return b;
    return -1;
  }
  /// Points the slots of `node`'s first real block at the null block. Returns 1 if the block
  /// became free.
  int64_t tombstone_first(Node* node) {
    const int32_t id = first_real(node);
    const bool had_null = node->blocks.front() == null_block;
    for (int32_t& slot : node->slots)
      if (slot / block_size == id) slot = static_cast<int32_t>(null_block * block_size + slot % block_size);
    node->blocks = blocks_of(node->slots, block_size);
    if (!had_null) add_user(null_block);
    return drop_user(id);
  }
  /// Tombstones unheld blocks, least recently used node first, until `n_blocks` are free.
  int64_t evict_tombstones(int64_t n_blocks) {
    std::vector<Node*> nodes;
    std::vector<Node*> stack{&root};
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      if (node != &root) nodes.push_back(node);
      for (auto& [token, child] : node->children) stack.push_back(child.get());
    }
    std::sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->last_access < b->last_access; });
    int64_t n_freed = 0;
    for (Node* node : nodes) {
      for (int32_t b = first_real(node); n_freed < n_blocks && b >= 0 && !held(b); b = first_real(node))
        n_freed += tombstone_first(node);
      if (n_freed >= n_blocks) break;
    }
    return n_freed;
  }

  // ---- one tree's operations (RadixPrefixCache's, on one KV cache group's table) -------------
  int64_t match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table);
  void insert(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table, bool finished);
  int64_t evict(int64_t n_blocks);
  int64_t n_evictable() const;
};

// ---- public API ------------------------------------------------------------------------------

RadixPrefixCache::RadixPrefixCache(BlockManager& blocks) : blocks_(blocks) {
  trees_.push_back(std::make_unique<Impl>(blocks));
}

// Drops the trees' hold on every block they cache (the BlockManager must still be alive: declare
// it before the cache), and detaches itself if it is the manager's attached cache.
RadixPrefixCache::~RadixPrefixCache() {
  if (blocks_.prefix_cache() == this) blocks_.set_prefix_cache(nullptr);
  for (const std::unique_ptr<Impl>& t : trees_) {
    for (size_t id = 0; id < t->node_count.size(); ++id) {
      if (t->node_count[id] > 0) blocks_.unref(static_cast<int32_t>(id));
    }
  }
}

RadixPrefixCache::Impl& RadixPrefixCache::tree(int64_t g, const KvCacheCoordinator* kv) {
  while (static_cast<int64_t>(trees_.size()) <= g) trees_.push_back(std::make_unique<Impl>(blocks_));
  Impl& t = *trees_[static_cast<size_t>(g)];
  if (kv != nullptr && kv->window(g) > 0) t.null_block = kv->null_block();
  return t;
}

// Each group's tree matches on its own; the hit is the shortest, then shrinks a block at a time
// until every windowed group's entries that the next query sees are real blocks (a tree may
// have been given the null block for positions a sequence's window had passed).
int64_t RadixPrefixCache::match(std::span<const int32_t> tokens, GroupTables& tables, KvCacheCoordinator& kv) {
  LIO_CHECK(static_cast<int64_t>(tables.size()) == kv.n_groups(), "radix match: one table per KV cache group");
  int64_t hit = static_cast<int64_t>(tokens.size());
  for (size_t g = 0; g < tables.size(); ++g) hit = std::min(hit, tree(static_cast<int64_t>(g), &kv).match(tokens, tables[g]));
  const int64_t bs = blocks_.block_size();
  const auto serves = [&](int64_t n) {
    for (size_t g = 0; g < tables.size(); ++g)
      for (int64_t b = kv.first_kept_block(kv.window(static_cast<int64_t>(g)), n); b < blocks_.blocks_for(n); ++b)
        if (tables[g][static_cast<size_t>(b)] == kv.null_block()) return false;
    return true;
  };
  while (hit > 0 && !serves(hit)) hit = (hit - 1) / bs * bs;
  for (BlockTable& t : tables) blocks_.truncate(t, hit);  // the sequence's holds past the hit go
  kv.release_out_of_window(tables, hit);  // and, in a windowed group, those before its window
  return hit;
}

void RadixPrefixCache::insert(std::span<const int32_t> tokens, int64_t n_computed, const GroupTables& tables,
                              const KvCacheCoordinator& kv, bool finished) {
  LIO_CHECK(static_cast<int64_t>(tables.size()) == kv.n_groups(), "radix insert: one table per KV cache group");
  for (size_t g = 0; g < tables.size(); ++g) tree(static_cast<int64_t>(g), &kv).insert(tokens, n_computed, tables[g], finished);
}

int64_t RadixPrefixCache::match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table) {
  return tree(0, nullptr).match(tokens, block_table);
}

void RadixPrefixCache::insert(std::span<const int32_t> tokens, int64_t n_computed, std::span<const int32_t> block_table,
                              bool finished) {
  tree(0, nullptr).insert(tokens, n_computed, block_table, finished);
}

// Walks from the root while the tokens agree (at most tokens.size() - 1 of them), without
// splitting the node the match ends in. A matched prefix must be usable as a block table: every
// matched position p must sit at offset p % block_size of the block chosen for block index
// p / block_size; where two sequences' slots meet inside one block index, the deeper block is
// taken for the whole index (it holds the earlier positions too).
int64_t RadixPrefixCache::Impl::match(std::span<const int32_t> tokens, std::vector<int32_t>& block_table) {
  Impl& s = *this;
  if (tokens.size() < 2) return 0;
  const auto limit = static_cast<int64_t>(tokens.size()) - 1;
  const int64_t bs = s.block_size;
  const size_t first_new = block_table.size();
  ++s.tick;

  const Node* node = &s.root;
  int64_t pos = 0;
  bool stopped = false;  // the match ended inside an edge (a mismatch, the limit, a block clash)
  while (!stopped && pos < limit) {
    const auto it = node->children.find(tokens[static_cast<size_t>(pos)]);
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    size_t i = 0;
    for (;
         i < child->key.size() && pos < limit && child->key[i] == tokens[static_cast<size_t>(pos)];
         ++i, ++pos) {
      const int32_t slot = child->slots[i];
      const auto id = static_cast<int32_t>(slot / bs);
      if (slot % bs != pos % bs) break;
      if (pos % bs == 0) {
        block_table.push_back(id);
      } else if (block_table.size() == first_new) {
        break;
      } else {
        // Two sequences' slots meet inside this block index (one copied the shared partial
        // block before writing on): the deeper block also holds every earlier position of the
        // index — copied or computed for the same tokens — so it serves the whole index.
        block_table.back() = id;
      }
    }
    if (i > 0) child->last_access = s.tick;
    stopped = i < child->key.size();
    node = child;
  }
  for (size_t k = first_new; k < block_table.size(); ++k)
    s.bm.ref(block_table[k]);  // the sequence's holds
  return pos;
}

// Walks along tokens[0, n) (n = n_computed, or its full blocks while the sequence runs), keeping
// the slots of tokens the tree already has; splits the edge where the tokens diverge inside it
// and stores the rest as a new leaf, or as an extension of the leaf the walk ran off the end of.
// Allocates nothing when the tree already has all n tokens.
void RadixPrefixCache::Impl::insert(std::span<const int32_t> tokens, int64_t n_computed,
                                    std::span<const int32_t> block_table, bool finished) {
  Impl& s = *this;
  const int64_t bs = s.block_size;
  LIO_CHECK(n_computed >= 0 && n_computed <= static_cast<int64_t>(tokens.size()),
            "radix insert: n_computed " + std::to_string(n_computed) + " outside [0, " +
                std::to_string(tokens.size()) + "]");
  const int64_t n = finished ? n_computed : n_computed / bs * bs;
  LIO_CHECK(static_cast<int64_t>(block_table.size()) >= s.bm.blocks_for(n),
            "radix insert: " + std::to_string(block_table.size()) + " blocks cannot hold " +
                std::to_string(n) + " tokens");
  ++s.tick;

  Node* node = &s.root;
  int64_t pos = 0;
  while (pos < n) {
    const auto it = node->children.find(tokens[static_cast<size_t>(pos)]);
    if (it == node->children.end()) {
      if (node != &s.root && node->children.empty()) {
        s.append_edge(node, tokens, pos, n, block_table);  // ran off the end of a leaf: extend it
      } else {
        auto leaf = std::make_unique<Node>();
        leaf->last_access = s.tick;
        leaf->parent = node;
        s.append_edge(leaf.get(), tokens, pos, n, block_table);
        node->children.emplace(tokens[static_cast<size_t>(pos)], std::move(leaf));
        ++s.n_nodes;
      }
      return;
    }
    Node* child = it->second.get();
    const auto n_edge = static_cast<int64_t>(child->key.size());
    int64_t common = 0;
    while (common < n_edge && pos + common < n &&
           child->key[static_cast<size_t>(common)] == tokens[static_cast<size_t>(pos + common)]) {
      ++common;
    }
    pos += common;
    if (common == n_edge || pos == n) {
      child->last_access = s.tick;
      if (common < n_edge) return;  // the tokens end inside this edge: nothing new
      node = child;
    } else {
      node = s.split(child, common);  // the tail keeps its tick: this insert went elsewhere
      node->last_access = s.tick;
    }
  }
}

void RadixPrefixCache::on_block_reused(int32_t id) {
  for (const std::unique_ptr<Impl>& t : trees_) {
    LIO_CHECK(id < 0 || id >= static_cast<int64_t>(t->node_count.size()) ||
                  t->node_count[static_cast<size_t>(id)] == 0,
              "radix tree: block " + std::to_string(id) + " reused while the tree holds it");
  }
}

// Tree by tree, the last KV cache group's first (a windowed group's blocks are the cheapest to
// lose: only a hit's last window needs them); within a tree, least recently used first.
int64_t RadixPrefixCache::evict(int64_t n_blocks) {
  int64_t n_freed = 0;
  for (auto t = trees_.rbegin(); t != trees_.rend() && n_freed < n_blocks; ++t) n_freed += (*t)->evict(n_blocks - n_freed);
  return n_freed;
}

int64_t RadixPrefixCache::n_evictable() const {
  int64_t n = 0;
  for (const std::unique_ptr<Impl>& t : trees_) n += t->n_evictable();
  return n;
}

// Least recently used leaf first (a min-heap on last_access), one block at a time from the
// leaf's end; a leaf whose last block a sequence holds is skipped, and an emptied leaf goes,
// which may make its parent a leaf.
int64_t RadixPrefixCache::Impl::evict(int64_t n_blocks) {
  Impl& s = *this;
  if (n_blocks <= 0) return 0;
  using Entry = std::pair<int64_t, Node*>;  // (last_access, leaf)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> lru;
  std::vector<Node*> stack{&s.root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (s.trimmable(node)) lru.emplace(node->last_access, node);
    for (auto& [token, child] : node->children) stack.push_back(child.get());
  }

  int64_t n_freed = 0;
  while (n_freed < n_blocks && !lru.empty()) {
    Node* leaf = lru.top().second;
    lru.pop();
    const int32_t first_token = leaf->key.front();
    n_freed += s.trim_last_block(leaf);
    if (!leaf->blocks.empty()) {
      if (!s.held(leaf->blocks.back())) lru.emplace(leaf->last_access, leaf);
      continue;
    }
    Node* parent = leaf->parent;
    s.remove_empty_leaf(leaf, first_token);
    if (s.trimmable(parent)) lru.emplace(parent->last_access, parent);
  }
  if (s.null_block >= 0 && n_freed < n_blocks) n_freed += s.evict_tombstones(n_blocks - n_freed);
  return n_freed;
}

// Exactly what evict(infinity) would free now: a block goes once no node using it has a held
// block at or below it (later in its own edge, or anywhere in its subtree).
int64_t RadixPrefixCache::Impl::n_evictable() const {
  const Impl& s = *this;
  // Pre-order, so the reverse visits every child before its parent.
  std::vector<Node*> order;
  std::vector<Node*> stack;
  for (const auto& [token, child] : s.root.children) stack.push_back(child.get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    node->pinned = false;
    order.push_back(node);
    for (auto& [token, child] : node->children) stack.push_back(child.get());
  }
  std::vector<char> keep(s.node_count.size(), 0);  // (n_blocks) a block some node must keep
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    // From the edge's end: once a held block is met (or the subtree below holds one), it and
    // every block before it in this edge stay.
    bool pinned = node->pinned;
    for (auto b = node->blocks.rbegin(); b != node->blocks.rend(); ++b) {
      pinned = pinned || s.held(*b);
      if (pinned) keep[static_cast<size_t>(*b)] = 1;
    }
    if (pinned && node->parent != nullptr) node->parent->pinned = true;
  }
  if (s.null_block >= 0) {  // a windowed tree also frees, by tombstones, each edge's unheld head
    keep[static_cast<size_t>(s.null_block)] = 1;
    for (const Node* node : order) {
      for (const int32_t b : node->blocks) {
        if (b == s.null_block) continue;
        if (s.held(b)) break;
        keep[static_cast<size_t>(b)] = 0;
      }
    }
  }
  int64_t n = 0;
  for (size_t id = 0; id < keep.size(); ++id) n += (s.node_count[id] > 0 && keep[id] == 0) ? 1 : 0;
  return n;
}

int64_t RadixPrefixCache::n_cached_tokens() const {
  int64_t n = 0;
  for (const std::unique_ptr<Impl>& t : trees_) n += t->n_tokens;
  return n;
}

int64_t RadixPrefixCache::n_nodes() const {
  int64_t n = 0;
  for (const std::unique_ptr<Impl>& t : trees_) n += t->n_nodes;
  return n;
}

}  // namespace lio
