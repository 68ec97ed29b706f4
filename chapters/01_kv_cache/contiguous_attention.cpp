// contiguous_attention.cpp — chapter 01's decode_attention over each sequence's one contiguous
// block (see contiguous_attention.h).
#include "contiguous_attention.h"

#include <cmath>
#include <span>
#include <utility>

#include "cpu_ops.h"
#include "lio/error.h"
#include "lio/forward_batch.h"
#include "lio/kv_cache.h"
#include "lio/kv_pool.h"

namespace lio::ch01 {

ContiguousAttentionBackend::ContiguousAttentionBackend(std::unique_ptr<Backend> inner)
    : ForwardingBackend(std::move(inner)) {}

std::string ContiguousAttentionBackend::device_description() const {
  return ForwardingBackend::device_description() +
         ", attention: chapter 01's decode_attention over one contiguous block";
}

void ContiguousAttentionBackend::attention(KvPool& pool, int64_t layer, const float* q, float* out,
                                           const BatchView& batch) {
  auto* host = dynamic_cast<HostKvPool*>(&pool);
  if (host == nullptr || pool.dtype() != KvCacheDType::F32) {
    throw UnsupportedError(
        "chapter 01's contiguous attention reads an f32 pool in host memory (--device cpu, "
        "--kv-cache-dtype f32)");
  }
  const ForwardBatch& b = *batch.host;
  const ModelConfig& c = config();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t kvd = c.kv_dim(), qd = c.q_dim(), bs = b.block_size;
  const KvCache& slots = host->slots();
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int64_t q0 = b.query_start_loc[static_cast<size_t>(s)];
    const int64_t first_pos = b.seq_lens[static_cast<size_t>(s)] - b.query_len(s);
    const int64_t first_slot = b.block_tables[static_cast<size_t>(s * b.max_blocks_per_seq)] * bs;
    for (int64_t i = q0; i < q0 + b.query_len(s); ++i) {
      const int64_t n_ctx = first_pos + (i - q0) + 1;
      if (n_ctx > bs) {
        throw InvalidArgument("chapter 01's contiguous cache: position " +
                              std::to_string(n_ctx - 1) + " is past the sequence's one block of " +
                              std::to_string(bs) + " tokens");
      }
      // The row's keys are the slots first_slot .. first_slot + n_ctx - 1: Task 3's prefix views
      // (from the block's start up to the row's last key), attended with Task 4's decode step.
      const std::span<const float> k =
          slots.key_prefix(layer, first_slot + n_ctx).subspan(first_slot * kvd);
      const std::span<const float> v =
          slots.value_prefix(layer, first_slot + n_ctx).subspan(first_slot * kvd);
      cpu::decode_attention(q + i * qd, k.data(), v.data(), out + i * qd, n_ctx, c.n_heads,
                            c.n_kv_heads, c.head_dim, scale);
    }
  }
}

}  // namespace lio::ch01
