// Chapter 01, Task 3 — YOUR implementation: append one step's K/V, read the cached prefix.
// Declarations: common/model/include/lio/kv_cache.h (class KvCache). Grade: ctest -R ch01_task_3
//
// Layout you work with (members of KvCache): for each layer, a key slab and a value slab of
// capacity_tokens_ rows x kv_dim_ floats (kv_dim_ = n_kv_heads * head_dim), row-major.
// keys(layer) / values(layer) return the start of a layer's slab.
#include <algorithm>
#include <string>

#include "lio/error.h"
#include "lio/kv_cache.h"

namespace lio {

void KvCache::write(int64_t layer, int64_t pos, const float* k, const float* v) {
  // TODO(Task 3): keep this step's key and value (kv_dim_ floats each) for position `pos` of
  //   `layer` in the slabs above, so that key_prefix / value_prefix hand them back in position
  //   order without copying or allocating. Throw lio::InvalidArgument, saying which, for a
  //   position outside the capacity or a layer outside the model.
  (void)layer, (void)pos, (void)k, (void)v;
  throw NotImplemented("Task 3 (exercises/01_kv_cache/kv_cache_ops.cpp): KvCache::write — "
                       "lesson docs/01_kv_cache.md, Task 3");
}

std::span<const float> KvCache::key_prefix(int64_t layer, int64_t n_tokens) const {
  // TODO(Task 3): the cached keys of positions [0, n_tokens) of `layer` as one view, shaped as
  //   lio/kv_cache.h states (what decode attention reads). Throw as lio/kv_cache.h lists.
  (void)layer, (void)n_tokens;
  throw NotImplemented("Task 3 (exercises/01_kv_cache/kv_cache_ops.cpp): KvCache::key_prefix — "
                       "lesson docs/01_kv_cache.md, Task 3");
}

std::span<const float> KvCache::value_prefix(int64_t layer, int64_t n_tokens) const {
  // TODO(Task 3): as key_prefix, over the value slab.
  (void)layer, (void)n_tokens;
  throw NotImplemented("Task 3 (exercises/01_kv_cache/kv_cache_ops.cpp): KvCache::value_prefix — "
                       "lesson docs/01_kv_cache.md, Task 3");
}

}  // namespace lio
