#include "lio/cpu_backend.h"

#include "lio/omp_compat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <string>

#include "cpu_ops.h"
#include "first_error.h"
#include "lio/error.h"
#include "lio/gqa.h"
#include "lio/mla.h"
#include "lio/quantization.h"

namespace lio {

namespace {

/// The per-layer matrices, in packed-slot order.
constexpr WeightKind kPackedKinds[] = {WeightKind::Wq,   WeightKind::Wk,   WeightKind::Wv,   WeightKind::Wo,
                                       WeightKind::Gate, WeightKind::Up,   WeightKind::Down, WeightKind::WkvA,
                                       WeightKind::WkB,  WeightKind::WvB};
constexpr int64_t kPackedPerLayer = std::size(kPackedKinds);

int64_t packed_slot(WeightRef w, int64_t n_layers) {
  if (w.kind == WeightKind::Output) return n_layers * kPackedPerLayer;
  for (int64_t i = 0; i < kPackedPerLayer; ++i)
    if (kPackedKinds[i] == w.kind) return w.layer * kPackedPerLayer + i;
  return -1;
}

}  // namespace

// ---- profiling (set_profiling) ---------------------------------------------------------------

class CpuBackend::OpScope {
 public:
  OpScope(CpuBackend& b, const char* op, double weight_bytes = 0)
      : b_(b), op_(op), bytes_(weight_bytes), t0_(b.begin_op()) {}
  ~OpScope() {
    if (t0_ >= 0) b_.end_op(op_, t0_, bytes_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  CpuBackend& b_;
  const char* op_;
  double bytes_;
  int64_t t0_;
};

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int64_t CpuBackend::begin_op() {
  if (!profiling_ || op_open_) return -1;
  op_open_ = true;
  return steady_ns();
}

void CpuBackend::end_op(const char* op, int64_t t0, double weight_bytes) {
  const int64_t t1 = steady_ns();
  op_open_ = false;
  auto it = std::find_if(op_times_.begin(), op_times_.end(), [&](const CpuOpTime& t) { return t.op == op; });
  if (it == op_times_.end()) it = op_times_.insert(op_times_.end(), CpuOpTime{op});
  it->total_ms += static_cast<double>(t1 - t0) * 1e-6;
  it->calls += 1;
  it->weight_bytes += weight_bytes;
}

std::vector<CpuOpTime> CpuBackend::op_times() const {
  std::vector<CpuOpTime> out = op_times_;
  std::sort(out.begin(), out.end(), [](const CpuOpTime& a, const CpuOpTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

const char* CpuBackend::matmul_op_name(WeightKind w) {
  switch (w) {
    case WeightKind::Wq:
    case WeightKind::Wk:
    case WeightKind::Wv: return "matmul q/k/v";
    case WeightKind::Wo: return "matmul o";
    case WeightKind::Gate:
    case WeightKind::Up: return "matmul gate/up";
    case WeightKind::Down: return "matmul down";
    case WeightKind::Output: return "matmul lm_head";
    default: break;
  }
  return "matmul (mla)";
}

CpuBackend::CpuBackend(const ModelConfig& config, const Weights& weights, cpu::MatmulActivations activations,
                       AttentionBackend attention, cpu::CpuIsa isa)
    : config_(config), weights_(weights), activations_(activations), attention_backend_(attention), isa_(isa) {
  const auto n_layers = static_cast<int64_t>(weights_.layers.size());
  packed_.resize(static_cast<size_t>(n_layers * kPackedPerLayer + 1));
  // Everything one forward pass reads: each matrix packed, the embedding table, the norms. The
  // tied LM head is packed apart from the embedding rows it shares bytes with.
  weight_bytes_ = weights_.token_embd.size_bytes() + static_cast<int64_t>(weights_.output_norm.size() * sizeof(float));
  const auto add = [&](WeightRef ref, const WeightMatrix& m) {
    if (m.data == nullptr || m.rows == 0) return;  // absent: MLA's wk / wv, a GQA model's MLA slots
    auto& slot = packed_[static_cast<size_t>(packed_slot(ref, n_layers))];
    slot = std::make_unique<cpu::PackedMatrix>(m);
    weight_bytes_ += slot->size_bytes();
  };
  for (int64_t l = 0; l < n_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    for (const WeightKind k : kPackedKinds) add({k, l}, matrix({k, l}));
    weight_bytes_ += static_cast<int64_t>(L.vector_floats() * sizeof(float));
  }
  add({WeightKind::Output}, weights_.output);
}

std::string CpuBackend::device_description() const {
  const char* act = activations_ == cpu::MatmulActivations::Int8           ? ", int8 activations per 32 block)"
                    : activations_ == cpu::MatmulActivations::Int8PerToken ? ", int8 activations per token)"
                                                                           : ")";
  return "cpu (" + std::to_string(omp_get_max_threads()) + " threads, " + std::string(cpu::cpu_isa_name(isa_)) + act;
}

const cpu::PackedMatrix& CpuBackend::packed(WeightRef w) const {
  const int64_t slot = packed_slot(w, static_cast<int64_t>(weights_.layers.size()));
  const cpu::PackedMatrix* m = slot < 0 ? nullptr : packed_[static_cast<size_t>(slot)].get();
  if (m == nullptr) {
    throw InternalError("CpuBackend: this model has no matrix of kind " + std::to_string(static_cast<int>(w.kind)));
  }
  return *m;
}

std::unique_ptr<KvPool> CpuBackend::make_kv_pool(const KvPoolConfig& config) {
  if (config.dtype != KvCacheDType::F32 && config_.is_mla()) {
    throw UnsupportedError(std::string("--kv-cache-dtype ") + kv_cache_dtype_name(config.dtype) +
                           ": an MLA model's latent cache is f32 only");
  }
  return std::make_unique<HostKvPool>(config_, config);
}

BatchView CpuBackend::upload(const ForwardBatch& b) {
  BatchView v{&b, b.token_ids.data(), b.positions.data(), b.slot_mapping.data(),
              b.query_start_loc.data(), b.seq_lens.data(), b.block_tables.data(), b.logits_rows.data(), {}, {}};
  for (size_t g = 0; g < b.group_slot_mapping.size(); ++g) {
    v.group_slot_mapping.push_back(b.group_slot_mapping[g].data());
    v.group_block_tables.push_back(b.group_block_tables[g].data());
  }
  if (!b.tree_lens.empty()) v.tree_masks = b.tree_masks.data(), v.tree_lens = b.tree_lens.data();
  return v;
}

float* CpuBackend::scratch(Scratch id, int64_t n_floats) {
  std::vector<float>& buf = scratch_[static_cast<size_t>(id)];
  if (static_cast<int64_t>(buf.size()) < n_floats) buf.resize(static_cast<size_t>(n_floats));
  return buf.data();
}

const WeightMatrix& CpuBackend::matrix(WeightRef w) const { return weights_.matrix(w); }

const std::vector<float>& CpuBackend::vector(WeightRef w) const { return weights_.vector(w); }

void CpuBackend::embedding(const int32_t* token_ids, int64_t n, float* out) {
  const OpScope scope(*this, "embedding");
  const int64_t d = config_.d_model;
  for (int64_t i = 0; i < n; ++i) cpu::embedding_row(weights_.token_embd, token_ids[i], out + i * d);
  if (config_.embedding_scale != 1.0f)  // gemma3: rows times sqrt(d_model)
    for (int64_t i = 0; i < n * d; ++i) out[i] *= config_.embedding_scale;
}

void CpuBackend::rmsnorm(const float* x, WeightRef w, float* out, int64_t n_rows) {
  const OpScope scope(*this, "rmsnorm");
  const std::vector<float>& weight = vector(w);
  const int64_t width = norm_width(w.kind, config_);
  LIO_CHECK(static_cast<int64_t>(weight.size()) == width, "norm weight of the wrong length");
  cpu::rmsnorm(x, weight.data(), out, n_rows, width, config_.rms_norm_eps);
}

void CpuBackend::add_bias(float* y, WeightRef w, int64_t n_rows) {
  const OpScope scope(*this, "add_bias");
  const std::vector<float>& bias = vector(w);
  cpu::add_bias(y, bias.data(), n_rows, static_cast<int64_t>(bias.size()));
}

void CpuBackend::round_tokens(const float* x, int64_t n_rows, int64_t cols, bool row_parallel) {
  // W8A8: each token's row rounded to int8 with one scale (chapter 03, Task 6).
  token_codes_.resize(static_cast<size_t>(n_rows * cols));
  token_scales_.resize(static_cast<size_t>(n_rows));
  cpu::FirstError error;
  if (row_parallel && row_parallel_max_) {
    // This rank holds a shard of each row. The scale must be the whole row's, max|x| / 127 as one
    // process computes it: the group's largest |x| is appended to the shard, so Task 6 finds that
    // maximum and rounds the shard's elements on one process's grid (its own code is dropped).
    row_max_.assign(static_cast<size_t>(n_rows), 0.0f);
    for (int64_t r = 0; r < n_rows; ++r) {
      float m = 0.0f;
      for (int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(x[r * cols + c]));
      row_max_[static_cast<size_t>(r)] = m;
    }
    row_parallel_max_(row_max_.data(), n_rows);
    row_pad_.resize(static_cast<size_t>(cols + 1));
    std::vector<int8_t> codes(static_cast<size_t>(cols + 1));
    for (int64_t r = 0; r < n_rows; ++r) {
      std::copy(x + r * cols, x + (r + 1) * cols, row_pad_.begin());
      row_pad_[static_cast<size_t>(cols)] = row_max_[static_cast<size_t>(r)];
      token_scales_[static_cast<size_t>(r)] =
          quantize_row_int8(std::span<const float>(row_pad_.data(), static_cast<size_t>(cols + 1)), codes);
      std::copy(codes.begin(), codes.end() - 1, token_codes_.begin() + r * cols);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n_rows > 1)
  for (int64_t r = 0; r < n_rows; ++r) {
    error.run([&] {
      token_scales_[static_cast<size_t>(r)] =
          quantize_row_int8(std::span<const float>(x + r * cols, static_cast<size_t>(cols)),
                            std::span<int8_t>(token_codes_.data() + r * cols, static_cast<size_t>(cols)));
    });
  }
  error.rethrow();
}

bool CpuBackend::per_token_int8(WeightRef w, bool has_int8_kernel) const {
  // Per-token int8 only where there is an integer kernel, and never for the LM head (W8A8
  // recipes leave lm_head in f32: llm-compressor's W8A8 example, ignore=["lm_head"]).
  return activations_ == cpu::MatmulActivations::Int8PerToken && w.kind != WeightKind::Output && has_int8_kernel;
}

cpu::MatmulActivations CpuBackend::block_activations() const {
  // Int8 rounds every matmul's x, the LM head's too, as llama.cpp does (its Q8_0 head takes Q8_0
  // activations). Keeping the head in f32 measured better (mean KL from the F32 model 0.0033 vs
  // 0.0041, llama.cpp 0.0039) but cost 15-20% of batch-1 decode: int8 is the fast setting.
  return activations_ == cpu::MatmulActivations::Int8 ? activations_ : cpu::MatmulActivations::F32;
}

void CpuBackend::matmul(WeightRef w, const float* x, float* y, int64_t n_rows, bool accumulate) {
  const cpu::PackedMatrix& m = packed(w);
  const OpScope scope(*this, matmul_op_name(w.kind), static_cast<double>(m.size_bytes()));
  const cpu::PackedTarget t{&m, y, accumulate};
  if (per_token_int8(w, m.has_int8_kernel())) {
    round_tokens(x, n_rows, m.cols(), w.kind == WeightKind::Wo || w.kind == WeightKind::Down);
    return cpu::packed_matmul_int8({&t, 1}, token_codes_.data(), token_scales_.data(), n_rows, isa_, packed_scratch_);
  }
  cpu::packed_matmul({&t, 1}, x, n_rows, block_activations(), isa_, packed_scratch_);
}

void CpuBackend::matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n_rows) {
  // One packed call for all outputs (one fork/join, x rounded once) when they all take the same
  // activations; else one matmul each.
  std::vector<cpu::PackedTarget> targets;
  size_t n_per_token = 0;
  double bytes = 0;
  for (const MatmulOut& o : outs) {
    const cpu::PackedMatrix& m = packed(o.w);
    n_per_token += per_token_int8(o.w, m.has_int8_kernel()) ? 1 : 0;
    targets.push_back({&m, o.y, false});
    bytes += static_cast<double>(m.size_bytes());
  }
  if (targets.empty()) return;
  const OpScope scope(*this, matmul_op_name(outs[0].w.kind), bytes);
  if (n_per_token == targets.size()) {
    round_tokens(x, n_rows, targets[0].w->cols(), /*row_parallel=*/false);  // Q/K/V, gate/up: whole rows
    return cpu::packed_matmul_int8(targets, token_codes_.data(), token_scales_.data(), n_rows, isa_, packed_scratch_);
  }
  if (n_per_token == 0) return cpu::packed_matmul(targets, x, n_rows, block_activations(), isa_, packed_scratch_);
  for (const MatmulOut& o : outs) matmul(o.w, x, o.y, n_rows, false);
}

void CpuBackend::rope(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, float theta) {
  const OpScope scope(*this, "rope");
  cpu::rope(x, positions, n_tokens, n_heads, config_.head_dim, theta, config_.rope_style);
}

void CpuBackend::kv_append(KvPool& pool, int64_t layer, const float* k, const float* v, const BatchView& batch) {
  const OpScope scope(*this, "kv_append");
  auto* host = dynamic_cast<HostKvPool*>(&pool);
  LIO_CHECK(host != nullptr, "CpuBackend needs a HostKvPool");
  const int64_t kvd = config_.kv_dim(), hd = config_.head_dim;
  if (pool.dtype() == KvCacheDType::F16) {
    auto* kp = static_cast<uint16_t*>(pool.key_data(layer));
    auto* vp = static_cast<uint16_t*>(pool.value_data(layer));
    for (int64_t i = 0; i < batch.host->n_tokens(); ++i) {
      const int64_t slot = batch.slot_mapping[i];
      if (slot == kPadSlotId) continue;
      for (int64_t e = 0; e < kvd; ++e) {
        kp[slot * kvd + e] = f32_to_f16(k[i * kvd + e]);
        vp[slot * kvd + e] = f32_to_f16(v[i * kvd + e]);
      }
    }
    return;
  }
  if (pool.dtype() == KvCacheDType::Int8) {
    // Each (token, KV head) vector rounded with one scale: chapter 03's quantize_row_int8 (Task 6).
    auto* kp = static_cast<int8_t*>(pool.key_data(layer));
    auto* vp = static_cast<int8_t*>(pool.value_data(layer));
    float* ks = pool.key_scales(layer);
    float* vs = pool.value_scales(layer);
    const int64_t nh = config_.n_kv_heads;
    for (int64_t i = 0; i < batch.host->n_tokens(); ++i) {
      const int64_t slot = batch.slot_mapping[i];
      if (slot == kPadSlotId) continue;
      for (int64_t g = 0; g < nh; ++g) {
        const auto at = static_cast<size_t>(slot * kvd + g * hd);
        ks[slot * nh + g] = quantize_row_int8(std::span<const float>(k + i * kvd + g * hd, static_cast<size_t>(hd)),
                                              std::span<int8_t>(kp + at, static_cast<size_t>(hd)));
        vs[slot * nh + g] = quantize_row_int8(std::span<const float>(v + i * kvd + g * hd, static_cast<size_t>(hd)),
                                              std::span<int8_t>(vp + at, static_cast<size_t>(hd)));
      }
    }
    return;
  }
  KvCache& slots = host->slots();
  // Chapter 01, Task 3: the slot mapping turns "append at position p" into "write slot s".
  for (int64_t i = 0; i < batch.host->n_tokens(); ++i)
    if (batch.slot_mapping[i] != kPadSlotId) slots.write(pool.lane(layer), batch.slot_mapping[i], k + i * kvd, v + i * kvd);
}

void CpuBackend::map_rows_to_sequences(const ForwardBatch& b) {
  row_seq_.resize(static_cast<size_t>(b.n_tokens()));
  for (int64_t s = 0; s < b.n_seqs(); ++s)
    std::fill_n(row_seq_.begin() + b.query_start_loc[static_cast<size_t>(s)], b.query_len(s), static_cast<int32_t>(s));
}

int64_t CpuBackend::row_context(const ForwardBatch& b, int64_t i) const {
  const auto s = static_cast<size_t>(row_seq_[static_cast<size_t>(i)]);
  return b.seq_lens[s] - (b.query_start_loc[s + 1] - i) + 1;
}

void CpuBackend::attention(KvPool& pool, int64_t layer, const float* q, float* out, const BatchView& batch) {
  const OpScope scope(*this, "attention");
  // Chapter 07: every row, prefill and decode alike, through the tiled kernel (the default) or
  // its naive twin, reading K/V through each sequence's block table (f32, or f16 / int8 pools
  // dequantized as tiles are gathered, chapter 03). A row's result depends only on its own
  // position and keys, never on what else is in the batch (batch invariance).
  const ForwardBatch& b = *batch.host;
  const ModelConfig& c = config_;
  LIO_CHECK(dynamic_cast<HostKvPool*>(&pool) != nullptr, "CpuBackend needs a HostKvPool");
  // The GQA-aware kernels read KV head g once for query heads g * group .. (g + 1) * group - 1:
  // chapter 02's Task 1 must name that grouping (checked here, outside the parallel loops: a
  // learner's stub throws).
  const int64_t group = c.n_heads / c.n_kv_heads;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const int64_t g = kv_head_for_query_head(h, c.n_heads, c.n_kv_heads);
    if (g != h / group) {
      throw InvalidArgument("chapter 02 Task 1: kv_head_for_query_head(" + std::to_string(h) + ", " +
                            std::to_string(c.n_heads) + ", " + std::to_string(c.n_kv_heads) + ") returned " +
                            std::to_string(g) + "; grouped-query attention reads KV head " +
                            std::to_string(h / group) + " for it");
    }
  }
  cpu::PagedKvLayer kv;
  kv.element = pool.dtype() == KvCacheDType::F16    ? cpu::KvElement::F16
               : pool.dtype() == KvCacheDType::Int8 ? cpu::KvElement::Int8
                                                    : cpu::KvElement::F32;
  kv.k = pool.key_data(layer);
  kv.v = pool.value_data(layer);
  kv.k_scales = pool.key_scales(layer);
  kv.v_scales = pool.value_scales(layer);
  // batch.block_tables: this layer's KV cache group's tables (BatchView::for_group).
  const cpu::AttentionBatch ab{b.query_start_loc.data(), b.seq_lens.data(), batch.block_tables, b.n_seqs(),
                               b.max_blocks_per_seq, b.block_size, true, batch.tree_lens, batch.tree_masks};
  const cpu::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, c.softmax_scale(), c.layer_window(layer),
                                  c.attn_softcap};
  if (attention_backend_ == AttentionBackend::Flash) {
    cpu::flash_attention(q, kv, out, nullptr, ab, shape, flash_workspace_);
    return;
  }
  // The naive twin: each sequence's score matrix S (n_heads, query_len, n_keys) materialized.
  // For a decoding sequence on an f32 pool S is one row per head, which is exactly what chapter
  // 04's paged_decode_attention (Task 5) holds in its scores scratch: those rows go through it
  // (not with a window or Gemma 2's soft-cap, which that task's kernel does not take: the
  // naive kernel computes both). A draft tree's sequence has query_len >= 2 (a one-node tree
  // is the plain causal row), so it always reaches the naive kernel, which applies its mask.
  std::vector<int64_t> decode_seqs;
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int64_t qlen = b.query_len(s);
    if (qlen == 1 && kv.element == cpu::KvElement::F32 && shape.window == 0 && shape.softcap == 0.0f) {
      decode_seqs.push_back(s);
    } else if (qlen > 0) {
      const int32_t qsl[2] = {b.query_start_loc[static_cast<size_t>(s)], b.query_start_loc[static_cast<size_t>(s + 1)]};
      const cpu::AttentionBatch one{qsl, b.seq_lens.data() + s, batch.block_tables + s * b.max_blocks_per_seq, 1,
                                    b.max_blocks_per_seq, b.block_size, true,
                                    batch.tree_lens != nullptr ? batch.tree_lens + s : nullptr, batch.tree_masks};
      cpu::naive_attention(q, kv, out, nullptr, one, shape, naive_scores_);
    }
  }
  if (decode_seqs.empty()) return;
  int64_t max_ctx = 1;
  for (const int64_t s : decode_seqs) max_ctx = std::max<int64_t>(max_ctx, b.seq_lens[static_cast<size_t>(s)]);
  const auto scratch_floats = static_cast<size_t>(omp_get_max_threads() * max_ctx);
  if (attn_scores_.size() < scratch_floats) attn_scores_.resize(scratch_floats);
  const int64_t n_pairs = static_cast<int64_t>(decode_seqs.size()) * c.n_heads, qd = c.q_dim();
  cpu::FirstError error;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t pair = 0; pair < n_pairs; ++pair) {
    const int64_t s = decode_seqs[static_cast<size_t>(pair / c.n_heads)], h = pair % c.n_heads;
    const int64_t row = b.query_start_loc[static_cast<size_t>(s)];
    const std::span<const int32_t> table(batch.block_tables + s * b.max_blocks_per_seq,
                                         static_cast<size_t>(b.max_blocks_per_seq));
    const std::span<float> scores(attn_scores_.data() + omp_get_thread_num() * max_ctx, static_cast<size_t>(max_ctx));
    error.run([&] {
      cpu::paged_decode_attention(q + row * qd + h * c.head_dim, static_cast<const float*>(kv.k),
                                  static_cast<const float*>(kv.v), out + row * qd + h * c.head_dim, table,
                                  b.seq_lens[static_cast<size_t>(s)], b.block_size, c.n_kv_heads, h / group, c.head_dim,
                                  shape.scale, scores);
    });
  }
  error.rethrow();
}

void CpuBackend::mla_rope(float* q, float* latent, const int32_t* positions, int64_t n_tokens) {
  const OpScope scope(*this, "rope");
  const ModelConfig& c = config_;
  const int64_t dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, row = c.kv_lora_rank + dr;
  if (dr == 0) return;
  LIO_CHECK(static_cast<int64_t>(weights_.mla_rope_inv_freq.size()) == dr / 2, "MLA model without RoPE frequencies");
  const float* freq = weights_.mla_rope_inv_freq.data();
  for (int64_t i = 0; i < n_tokens; ++i) {
    cpu::rope_freqs(q + i * c.q_dim() + dn, positions[i], c.n_heads, dn + dr, dr, freq);  // each head's q_pe
    cpu::rope_freqs(latent + i * row + c.kv_lora_rank, positions[i], 1, row, dr, freq);  // the shared k_pe
  }
}

void CpuBackend::mla_attention(KvPool& pool, int64_t layer, const float* q, const float* latent, float* out,
                               const BatchView& batch) {
  const OpScope scope(*this, "attention (mla)");
  if (batch.tree_lens != nullptr) {
    throw UnsupportedError("CpuBackend: MLA attention has no tree mask; verify a draft tree on a model without MLA");
  }
  const ForwardBatch& b = *batch.host;
  const ModelConfig& c = config_;
  const int64_t H = c.n_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dc = c.kv_lora_rank;
  const int64_t dv = c.v_head_dim, row = dc + dr, half = c.kv_dim(), qd = c.q_dim(), bs = b.block_size;
  const float scale = c.softmax_scale();
  auto* host = dynamic_cast<HostKvPool*>(&pool);
  LIO_CHECK(host != nullptr, "CpuBackend needs a HostKvPool");
  const LayerWeights& L = weights_.layers.at(static_cast<size_t>(layer));
  const WeightMatrix& wk_b = L.matrix(WeightKind::WkB);
  const WeightMatrix& wv_b = L.matrix(WeightKind::WvB);
  LIO_CHECK(wk_b.dtype == DType::F32 && wv_b.dtype == DType::F32, "MLA up-projections must be f32");
  // 1. Each row's latent into the pool: first half in the K array, second half in V.
  KvCache& slots = host->slots();
  for (int64_t i = 0; i < b.n_tokens(); ++i)
    if (b.slot_mapping[static_cast<size_t>(i)] != kPadSlotId)
      slots.write(pool.lane(layer), b.slot_mapping[static_cast<size_t>(i)], latent + i * row, latent + i * row + half);
  // 2. Each sequence's cached latents, gathered through its block table into rows [c | k_pe].
  std::vector<int64_t> first(static_cast<size_t>(b.n_seqs()) + 1, 0);
  for (int64_t s = 0; s < b.n_seqs(); ++s) first[static_cast<size_t>(s) + 1] = first[static_cast<size_t>(s)] + b.seq_lens[static_cast<size_t>(s)];
  mla_latents_.resize(static_cast<size_t>(first.back() * row));
  const float* k_pool = pool.keys(layer);
  const float* v_pool = pool.values(layer);
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t* table = b.block_tables.data() + s * b.max_blocks_per_seq;
    for (int64_t j = 0; j < b.seq_lens[static_cast<size_t>(s)]; ++j) {
      const int64_t slot = static_cast<int64_t>(table[j / bs]) * bs + j % bs;
      float* dst = mla_latents_.data() + (first[static_cast<size_t>(s)] + j) * row;
      std::copy_n(k_pool + slot * half, half, dst);
      std::copy_n(v_pool + slot * half, half, dst + half);
    }
  }
  map_rows_to_sequences(b);
  const auto* wk = reinterpret_cast<const float*>(wk_b.data);
  const auto* wv = reinterpret_cast<const float*>(wv_b.data);
  const int64_t n_pairs = b.n_tokens() * H;
  if (c.mla_absorbed) {
    // 3a. Absorbed (chapter 02, Task 4): attention in latent space, one (row, head) per call.
    const MlaHeadShape shape{dn, dr, dc, dv};
    cpu::FirstError error;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t pair = 0; pair < n_pairs; ++pair) {
      const int64_t i = pair / H, h = pair % H, n_ctx = row_context(b, i);
      const float* qi = q + i * qd + h * (dn + dr);
      error.run([&] {
        mla_absorbed_attention_head(
            {qi, static_cast<size_t>(dn)}, {qi + dn, static_cast<size_t>(dr)},
            {wk + h * dn * dc, static_cast<size_t>(dn * dc)}, {wv + h * dv * dc, static_cast<size_t>(dv * dc)},
            {mla_latents_.data() + first[static_cast<size_t>(row_seq_[static_cast<size_t>(i)])] * row,
             static_cast<size_t>(n_ctx * row)},
            n_ctx, shape, scale, {out + i * H * dv + h * dv, static_cast<size_t>(dv)});
      });
    }
    error.rethrow();
    return;
  }
  // 3b. Naive: up-project every cached latent to K and V for all heads (one matmul per
  // sequence), then ordinary attention per (row, head).
  mla_c_.resize(static_cast<size_t>(first.back() * dc));
  for (int64_t j = 0; j < first.back(); ++j) std::copy_n(mla_latents_.data() + j * row, dc, mla_c_.data() + j * dc);
  mla_k_.resize(static_cast<size_t>(first.back() * H * dn));
  mla_v_.resize(static_cast<size_t>(first.back() * H * dv));
  matmul({WeightKind::WkB, layer}, mla_c_.data(), mla_k_.data(), first.back(), false);  // (n_ctx, H * d_nope)
  matmul({WeightKind::WvB, layer}, mla_c_.data(), mla_v_.data(), first.back(), false);  // (n_ctx, H * d_v)
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t pair = 0; pair < n_pairs; ++pair) {
    const int64_t i = pair / H, h = pair % H, n_ctx = row_context(b, i);
    const int64_t f = first[static_cast<size_t>(row_seq_[static_cast<size_t>(i)])];
    const float* qi = q + i * qd + h * (dn + dr);
    cpu::mla_attention_head_expanded(qi, qi + dn, mla_k_.data() + f * H * dn + h * dn, H * dn,
                                     mla_latents_.data() + f * row + dc, row, mla_v_.data() + f * H * dv + h * dv,
                                     H * dv, n_ctx, dn, dr, dv, scale, out + i * H * dv + h * dv);
  }
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const OpScope scope(*this, "swiglu");
  cpu::swiglu(gate, up, out, n);
}

void CpuBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  const OpScope scope(*this, "geglu");
  cpu::geglu(gate, up, out, n);
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  const OpScope scope(*this, "add");
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::scale(float* x, float factor, int64_t n) {
  const OpScope scope(*this, "scale");
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void CpuBackend::softcap(float* x, float cap, int64_t n) {
  const OpScope scope(*this, "softcap");
  cpu::softcap_scores(x, n, cap);
}

void CpuBackend::gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t dim, float* out) {
  const OpScope scope(*this, "gather_rows");
  for (int64_t i = 0; i < n_rows; ++i) std::copy_n(x + rows[i] * dim, dim, out + i * dim);
}

void CpuBackend::to_host(const float* src, int64_t n_floats, float* host) {
  const OpScope scope(*this, "to_host");
  if (src != host) std::copy_n(src, n_floats, host);
}

}  // namespace lio
