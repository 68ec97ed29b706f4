// The hash chain's block hash (xxHash, Debian libxxhash-dev).
#include <xxhash.h>

#include "lio/prefix_cache.h"

namespace lio {

uint64_t block_hash(uint64_t parent, std::span<const int32_t> block_tokens) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, &parent, sizeof(parent));
  XXH64_update(state, block_tokens.data(), block_tokens.size_bytes());
  const uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

}  // namespace lio
