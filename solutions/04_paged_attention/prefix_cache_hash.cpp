// Chapter 04, Task 4 — reference solution: prefix lookup over the hash chain of full blocks.
// Declaration and contract: common/engine/include/lio/prefix_cache.h (lio::hash_chain_match).
#include <algorithm>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

std::vector<int32_t> hash_chain_match(const HashChainIndex& index, std::span<const int32_t> tokens,
                                      int64_t block_size) {
  if (block_size < 1) throw InvalidArgument("hash_chain_match: block_size must be >= 1");
  std::vector<int32_t> blocks;
  // Only full blocks, and never the last token: its logits must be computed.
  const int64_t n_full = (static_cast<int64_t>(tokens.size()) - 1) / block_size;
  uint64_t parent = 0;
  for (int64_t k = 0; k < n_full; ++k) {
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(k * block_size), static_cast<size_t>(block_size));
    const uint64_t h = block_hash(parent, block);  // h_k = block_hash(h_{k-1}, block k's tokens)
    const auto it = index.by_hash.find(h);
    if (it == index.by_hash.end()) break;
    const HashChainIndex::Entry& e = index.entries[static_cast<size_t>(it->second)];
    // Same hash is not proof: compare what the block holds (a collision must not hit).
    if (!e.cached || e.parent != parent || !std::equal(block.begin(), block.end(), e.tokens.begin(), e.tokens.end())) break;
    blocks.push_back(it->second);
    parent = h;
  }
  return blocks;
}

}  // namespace lio
