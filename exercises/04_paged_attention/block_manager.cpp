// Chapter 04, Tasks 2 and 3 — YOUR implementation: reference-counted block allocation and
// copy-on-write. Declarations and contracts: common/engine/include/lio/block_manager.h.
// Members you use: ref_cnt_ (holders per block), free_ (std::list, front = evicted first),
// free_pos_ (each free block's position in free_, for O(1) removal), cache_ (may be nullptr),
// block_size_, check_id(id), n_free_blocks(), blocks_for(n_tokens).
// Grade: ctest -R "ch04_task_[23]"
#include <algorithm>
#include <string>

#include "lio/block_manager.h"
#include "lio/error.h"
#include "lio/prefix_cache.h"

namespace lio {

// ---- Task 2 -----------------------------------------------------------------------------------

int32_t BlockManager::allocate_block() {
  // TODO(Task 2): if free_ is empty and cache_ is set, cache_->evict(1); still empty -> return -1.
  //   Pop the FRONT of free_ (least recently used), tell cache_->on_block_reused(id) (if set),
  //   set its count to 1, return it.
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): allocate_block — "
                       "pop the free list's front, forget its cached content, count 1");
}

void BlockManager::ref(int32_t id) {
  // TODO(Task 2): check_id(id); a block with count 0 sits on free_: erase it (free_pos_[id]);
  //   then count += 1.
  (void)id;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): ref — one more holder");
}

void BlockManager::unref(int32_t id) {
  // TODO(Task 2): check_id(id); count 0 already -> throw InternalError (LIO_CHECK); count -= 1;
  //   at 0 push it to the BACK of free_ and remember where (free_pos_[id]).
  (void)id;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): unref — one holder fewer");
}

bool BlockManager::allocate(std::vector<int32_t>& block_table, int64_t n_tokens) {
  // TODO(Task 2): needed = blocks_for(n_tokens) - table size; <= 0 -> true. If fewer free
  //   blocks than needed, cache_->evict(the difference) (if set); still too few -> false with
  //   nothing changed. Else append `needed` allocate_block() ids.
  (void)block_table, (void)n_tokens;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): allocate — all or nothing");
}

void BlockManager::free(std::vector<int32_t>& block_table) {
  // TODO(Task 2): unref every block, LAST block first (it holds the longest prefix: evict it
  //   first), then clear the table.
  (void)block_table;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): free — unref last to first");
}

std::vector<int32_t> BlockManager::fork(std::span<const int32_t> block_table, int64_t n_tokens) {
  // TODO(Task 2): the first blocks_for(n_tokens) ids of the table (InvalidArgument if it has
  //   fewer), each ref()'d; return them as the child's table.
  (void)block_table, (void)n_tokens;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): fork — share the blocks");
}

// ---- Task 3 -----------------------------------------------------------------------------------

bool BlockManager::append_slots(std::vector<int32_t>& block_table, int64_t n_computed, int64_t n_new,
                                std::vector<BlockCopy>& copies) {
  // TODO(Task 3): positions [n_computed, n_computed + n_new) are about to be written.
  //   1. shared = existing table entries k from n_computed / block_size up to
  //      min(table size, blocks_for(n_computed + n_new)) whose block has count > 1
  //   2. needed = shared.size() + max(0, blocks_for(n_computed + n_new) - table size); make
  //      room as allocate() does, or return false with nothing changed
  //   3. for each shared k: fresh = allocate_block(); copies.push_back({table[k], fresh});
  //      unref(table[k]); table[k] = fresh   — never write a shared block in place
  //   4. allocate(table, n_computed + n_new)
  (void)block_table, (void)n_computed, (void)n_new, (void)copies;
  throw NotImplemented("Task 3 (exercises/04_paged_attention/block_manager.cpp): append_slots — "
                       "copy shared blocks before writing, then grow");
}

}  // namespace lio
