// Chapter 04, Task 4 — YOUR implementation: prefix lookup over the hash chain of full blocks.
// Declaration and contract: common/engine/include/lio/prefix_cache.h (lio::hash_chain_match).
// Grade: ctest -R ch04_task_4
#include <algorithm>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

std::vector<int32_t> hash_chain_match(const HashChainIndex& index, std::span<const int32_t> tokens,
                                      int64_t block_size) {
  // TODO(Task 4): walk the full blocks of tokens[0, tokens.size() - 1) — never the last token:
  //   parent = 0; for k = 0, 1, ... while (k + 1) * block_size <= tokens.size() - 1:
  //     h = block_hash(parent, tokens[k * bs, (k + 1) * bs))
  //     look h up in index.by_hash; stop at a miss
  //     e = index.entries[block id]: stop unless e.cached, e.parent == parent and e.tokens equal
  //       the block's tokens (a 64-bit hash can collide; a collision must never hit)
  //     append the block id; parent = h
  //   Throw InvalidArgument if block_size < 1.
  (void)index, (void)tokens, (void)block_size;
  throw NotImplemented("Task 4 (exercises/04_paged_attention/prefix_cache_hash.cpp): hash_chain_match — "
                       "hash each full block with its parent's hash, look it up, verify, stop at a miss");
}

}  // namespace lio
