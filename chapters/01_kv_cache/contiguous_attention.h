// contiguous_attention.h — chapter 01's decode step on chapter 01's cache, inside the one
// forward pass: the attention operator ch01_kv_cache runs.
//
// The engine's CPU attention reads every row through its sequence's block table (chapter 07's
// tiled kernel, or chapter 04's paged_decode_attention under --attention-backend naive;
// CpuBackend::attention). ch01_kv_cache reserves ONE block per
// sequence, long enough for the whole sequence (prompt + max_tokens), so a sequence's K/V are a
// contiguous run of slots: chapter 01's contiguous cache, the special case the paged pool
// generalizes. This backend keeps every operator of the device's backend and replaces only
// attention: each row attends that run with chapter 01's decode_attention (Task 4) over the
// KvCache's key_prefix / value_prefix views (Task 3). So the learner's chapter 01 code is what
// ch01_kv_cache runs, step by step, and Model::forward stays the only forward pass.
#pragma once

#include <memory>
#include <string>

#include "lio/forwarding_backend.h"

namespace lio::ch01 {

/// A CPU backend whose attention is chapter 01's decode_attention over each sequence's one
/// contiguous block (see the file comment). Every other operator is the inner backend's.
class ContiguousAttentionBackend final : public ForwardingBackend {
 public:
  /// Wraps `inner` (not null), which must make f32 host pools (CpuBackend with
  /// --kv-cache-dtype f32): attention() checks it.
  explicit ContiguousAttentionBackend(std::unique_ptr<Backend> inner);

  /// The inner backend's description, plus the attention path.
  std::string device_description() const override;

  /// For row i of sequence s at position p: decode_attention of q[i] over positions 0 .. p,
  /// read from slots first .. first + p of the pool, first = block_tables[s][0] * block_size
  /// (chapter 01's cache). Writes out (n_tokens, n_heads, head_dim). Throws InvalidArgument
  /// if a row's context does not fit its sequence's first block (the chapter 01 executable
  /// sizes the block so that it always does), UnsupportedError for a pool that is not an f32
  /// HostKvPool, and as decode_attention.
  void attention(KvPool& pool, int64_t layer, const float* q, float* out,
                 const BatchView& batch) override;
};

}  // namespace lio::ch01
