// forwarding_backend.h — a Backend that passes every operator to another one, for tools that
// watch the forward pass without changing it (the calibration passes of chapters 02 and 03:
// they override the operators whose inputs they record and call the base), or that run one
// operator their own way inside it (ch01_kv_cache: attention with chapter 01's decode step).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "lio/backend.h"

namespace lio {

/// Forwards every Backend operator to `inner` (see Backend for each one's contract). Derive
/// and override an operator to observe its arguments (call ForwardingBackend's version to run
/// it) or to replace it under the same contract. Throws whatever `inner` throws.
class ForwardingBackend : public Backend {
 public:
  /// Takes ownership of `inner` (not null).
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  const ModelConfig& config() const override { return inner_->config(); }
  std::string device_description() const override { return inner_->device_description(); }
  int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  int64_t free_memory_bytes() const override { return inner_->free_memory_bytes(); }
  std::unique_ptr<KvPool> make_kv_pool(const KvPoolConfig& c) override { return inner_->make_kv_pool(c); }
  BatchView upload(const ForwardBatch& b) override { return inner_->upload(b); }
  float* scratch(Scratch id, int64_t n) override { return inner_->scratch(id, n); }
  void embedding(const int32_t* t, int64_t n, float* out) override { inner_->embedding(t, n, out); }
  void rmsnorm(const float* x, WeightRef w, float* out, int64_t n) override { inner_->rmsnorm(x, w, out, n); }
  void add_bias(float* y, WeightRef w, int64_t n) override { inner_->add_bias(y, w, n); }
  void matmul(WeightRef w, const float* x, float* y, int64_t n, bool acc) override { inner_->matmul(w, x, y, n, acc); }
  void rope(float* x, const int32_t* p, int64_t n, int64_t h, float theta) override { inner_->rope(x, p, n, h, theta); }
  void kv_append(KvPool& pool, int64_t l, const float* k, const float* v, const BatchView& b) override {
    inner_->kv_append(pool, l, k, v, b);
  }
  void attention(KvPool& pool, int64_t l, const float* q, float* out, const BatchView& b) override {
    inner_->attention(pool, l, q, out, b);
  }
  void mla_rope(float* q, float* latent, const int32_t* p, int64_t n) override { inner_->mla_rope(q, latent, p, n); }
  void mla_attention(KvPool& pool, int64_t l, const float* q, const float* latent, float* out,
                     const BatchView& b) override {
    inner_->mla_attention(pool, l, q, latent, out, b);
  }
  void swiglu(const float* g, const float* u, float* out, int64_t n) override { inner_->swiglu(g, u, out, n); }
  void geglu(const float* g, const float* u, float* out, int64_t n) override { inner_->geglu(g, u, out, n); }
  void add(float* x, const float* y, int64_t n) override { inner_->add(x, y, n); }
  void gather_rows(const float* x, const int32_t* r, int64_t n, int64_t dim, float* out) override {
    inner_->gather_rows(x, r, n, dim, out);
  }
  void to_host(const float* src, int64_t n, float* host) override { inner_->to_host(src, n, host); }
  void from_host(const float* host, int64_t n, float* dst) override { inner_->from_host(host, n, dst); }
  bool host_memory() const override { return inner_->host_memory(); }
  void all_reduce(Communicator& c, float* x, int64_t n) override { inner_->all_reduce(c, x, n); }
  void all_gather(Communicator& c, const float* in, float* out, int64_t n) override { inner_->all_gather(c, in, out, n); }
  /// Forwards to the inner backend (a wrapper must not drop the tensor-parallel row max: per-token
  /// int8 would round each rank's shard at its own scale; Backend::set_row_parallel_max).
  void set_row_parallel_max(std::function<void(float*, int64_t)> row_max) override {
    inner_->set_row_parallel_max(std::move(row_max));
  }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace lio
