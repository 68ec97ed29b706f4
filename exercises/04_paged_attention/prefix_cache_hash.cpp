// Chapter 04, Task 4 — YOUR implementation: prefix lookup over the hash chain of full blocks.
// Declaration and contract: common/engine/include/lio/prefix_cache.h (lio::hash_chain_match).
// Grade: ctest -R ch04_task_4
#include <algorithm>

#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

std::vector<int32_t> hash_chain_match(const HashChainIndex& index, std::span<const int32_t> tokens,
                                      int64_t block_size) {
  // TODO(Task 4): the cached blocks holding the longest prefix of `tokens` made of whole
  //   blocks, in order (lio/prefix_cache.h's contract; vLLM's hash chain). Must hold: a block
  //   matches only with the same tokens AND the same prefix before it; a 64-bit hash collision
  //   never hits; the prompt's last token is never served from the cache (its logits are
  //   needed). Lesson: docs/04_paged_attention.md, "Task 4". Throw InvalidArgument if
  //   block_size < 1.
  (void)index, (void)tokens, (void)block_size;
  throw NotImplemented("Task 4 (exercises/04_paged_attention/prefix_cache_hash.cpp): hash_chain_match — "
                       "lesson docs/04_paged_attention.md, section 5 and Task 4");
}

}  // namespace lio
