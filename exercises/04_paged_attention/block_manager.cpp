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
  // TODO(Task 2): the contract in lio/block_manager.h. The free list's order is the prefix
  //   cache's eviction order (front = least recently used), and a reused block's old content
  //   must never be returned as a cache hit again. Lesson: docs/04_paged_attention.md, "Task 2".
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): allocate_block — "
                       "lesson docs/04_paged_attention.md, section 2 and Task 2");
}

void BlockManager::ref(int32_t id) {
  // TODO(Task 2): lio/block_manager.h's contract; a held block is never on the free list.
  (void)id;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): ref — "
                       "lesson docs/04_paged_attention.md, section 4 and Task 2");
}

void BlockManager::unref(int32_t id) {
  // TODO(Task 2): lio/block_manager.h's contract: a double free is an InternalError, and a
  //   block nobody holds keeps its content for the prefix cache until it is reused.
  (void)id;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): unref — "
                       "lesson docs/04_paged_attention.md, section 4 and Task 2");
}

bool BlockManager::allocate(std::vector<int32_t>& block_table, int64_t n_tokens) {
  // TODO(Task 2): lio/block_manager.h's contract: all or nothing (a failed call changes
  //   neither the table nor the pool), evicting cached blocks before giving up.
  (void)block_table, (void)n_tokens;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): allocate — "
                       "lesson docs/04_paged_attention.md, Task 2");
}

void BlockManager::free(std::vector<int32_t>& block_table) {
  // TODO(Task 2): lio/block_manager.h's contract. In what order should the blocks go back, so
  //   that the prefix cache evicts the least shareable first? (Lesson, "Task 2".)
  (void)block_table;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): free — "
                       "lesson docs/04_paged_attention.md, sections 2 and 5, Task 2");
}

std::vector<int32_t> BlockManager::fork(std::span<const int32_t> block_table, int64_t n_tokens) {
  // TODO(Task 2): lio/block_manager.h's contract: parallel sampling's n children share the
  //   prompt's blocks (Kwon et al. 2023, sec. 4.4); nothing is copied here.
  (void)block_table, (void)n_tokens;
  throw NotImplemented("Task 2 (exercises/04_paged_attention/block_manager.cpp): fork — "
                       "lesson docs/04_paged_attention.md, section 4 and Task 2");
}

// ---- Task 3 -----------------------------------------------------------------------------------

bool BlockManager::append_slots(std::vector<int32_t>& block_table, int64_t n_computed, int64_t n_new,
                                std::vector<BlockCopy>& copies) {
  // TODO(Task 3): copy-on-write (Kwon et al. 2023, sec. 4.4), lio/block_manager.h's contract:
  //   positions [n_computed, n_computed + n_new) are about to be written, and a block another
  //   holder shares is never written in place; each copy the engine must make is reported in
  //   `copies`; all or nothing. Which blocks can those positions touch, and how many fresh
  //   blocks does the call need before it changes anything? Lesson: "Task 3".
  (void)block_table, (void)n_computed, (void)n_new, (void)copies;
  throw NotImplemented("Task 3 (exercises/04_paged_attention/block_manager.cpp): append_slots — "
                       "lesson docs/04_paged_attention.md, section 4 and Task 3");
}

}  // namespace lio
