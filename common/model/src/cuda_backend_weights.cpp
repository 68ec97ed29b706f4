// cuda_backend_weights.cpp — the CUDA backend's weights in device memory: uploaded once (a
// tied head shares the embedding's copy), and looked up by WeightRef for each operator.
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cuda_backend_impl.h"
#include "device_matrix.h"
#include "lio/error.h"

namespace lio::cuda {

void CudaBackend::Impl::upload_weights(const Weights& weights) {
  Impl& m = *this;
  m.token_embd = m.upload(weights.token_embd, /*in_matmul=*/false);
  m.layers.reserve(weights.layers.size());
  for (const LayerWeights& L : weights.layers) {
    DeviceLayer d;
    d.attn_norm = m.upload(L.attn_norm);
    d.wq = m.upload(L.wq);
    if (config.is_mla()) {
      d.wkv_a = m.upload(L.wkv_a);
      d.wk_b = m.upload(L.wk_b);
      d.wv_b = m.upload(L.wv_b);
    } else {
      d.wk = m.upload(L.wk);
      d.wv = m.upload(L.wv);
    }
    d.wo = m.upload(L.wo);
    d.ffn_norm = m.upload(L.ffn_norm);
    d.w_gate = m.upload(L.w_gate);
    d.w_up = m.upload(L.w_up);
    d.w_down = m.upload(L.w_down);
    const auto optional = [&](const std::vector<float>& v) { return v.empty() ? nullptr : m.upload(v); };
    d.bq = optional(L.bq);
    d.bk = optional(L.bk);
    d.bv = optional(L.bv);
    d.q_norm = optional(L.q_norm);
    d.k_norm = optional(L.k_norm);
    d.post_attn_norm = optional(L.post_attn_norm);
    d.post_ffn_norm = optional(L.post_ffn_norm);
    m.layers.push_back(d);
  }
  m.output_norm = m.upload(weights.output_norm);
  m.output = m.upload(weights.output);
  if (config.is_mla() && config.qk_rope_head_dim > 0) {
    if (static_cast<int64_t>(weights.mla_rope_inv_freq.size()) != config.qk_rope_head_dim / 2) {
      throw InvalidArgument("CudaBackend: MLA model without its " + std::to_string(config.qk_rope_head_dim / 2) +
                            " RoPE frequencies");
    }
    m.mla_inv_freq = m.upload(weights.mla_rope_inv_freq);
  }
}

DeviceMatrix CudaBackend::Impl::upload(const WeightMatrix& w, bool in_matmul) {
  auto it = uploaded.find(w.data);
  const std::byte* device_data = nullptr;
  if (it != uploaded.end()) {
    device_data = it->second;
  } else {
    DeviceBuffer<std::byte> buf(w.size_bytes());
    buf.copy_from_host(w.data, w.size_bytes());
    device_data = buf.data();
    weight_bytes += w.size_bytes();
    matrix_buffers.push_back(std::move(buf));
    uploaded.emplace(w.data, device_data);
  }
  if (in_matmul && w.dtype != DType::F32) {
    max_dequant_floats = std::max(max_dequant_floats, w.rows * w.cols);
  }
  return DeviceMatrix{w.dtype, w.rows, w.cols, w.row_bytes, device_data};
}

const float* CudaBackend::Impl::upload(const std::vector<float>& v) {
  vector_buffers.push_back(DeviceBuffer<float>::from_host(v));
  weight_bytes += static_cast<int64_t>(v.size() * sizeof(float));
  return vector_buffers.back().data();
}

const DeviceLayer& CudaBackend::Impl::layer(WeightRef ref) const {
  if (ref.layer < 0 || ref.layer >= static_cast<int64_t>(layers.size())) {
    throw InvalidArgument("CudaBackend: weight layer " + std::to_string(ref.layer) +
                          " outside [0, " + std::to_string(layers.size()) + ")");
  }
  return layers[static_cast<size_t>(ref.layer)];
}

const DeviceMatrix& CudaBackend::Impl::matrix(WeightRef ref) const {
  switch (ref.kind) {
    case WeightKind::TokenEmbd: return token_embd;
    case WeightKind::Output: return output;
    case WeightKind::Wq: return layer(ref).wq;
    case WeightKind::Wk: return layer(ref).wk;
    case WeightKind::Wv: return layer(ref).wv;
    case WeightKind::Wo: return layer(ref).wo;
    case WeightKind::Gate: return layer(ref).w_gate;
    case WeightKind::Up: return layer(ref).w_up;
    case WeightKind::Down: return layer(ref).w_down;
    case WeightKind::WkvA: return layer(ref).wkv_a;
    case WeightKind::WkB: return layer(ref).wk_b;
    case WeightKind::WvB: return layer(ref).wv_b;
    default: break;
  }
  throw InvalidArgument("CudaBackend::matmul: weight kind " +
                        std::to_string(static_cast<int>(ref.kind)) + " is not a matrix");
}

const float* CudaBackend::Impl::vector(WeightRef ref) const {
  const float* v = nullptr;
  switch (ref.kind) {
    case WeightKind::AttnNorm: v = layer(ref).attn_norm; break;
    case WeightKind::FfnNorm: v = layer(ref).ffn_norm; break;
    case WeightKind::OutputNorm: v = output_norm; break;
    case WeightKind::QNorm: v = layer(ref).q_norm; break;
    case WeightKind::KNorm: v = layer(ref).k_norm; break;
    case WeightKind::PostAttnNorm: v = layer(ref).post_attn_norm; break;
    case WeightKind::PostFfnNorm: v = layer(ref).post_ffn_norm; break;
    case WeightKind::BiasQ: v = layer(ref).bq; break;
    case WeightKind::BiasK: v = layer(ref).bk; break;
    case WeightKind::BiasV: v = layer(ref).bv; break;
    default:
      throw InvalidArgument("CudaBackend: weight kind " + std::to_string(static_cast<int>(ref.kind)) +
                            " is not a norm or bias");
  }
  if (v == nullptr) {
    throw InvalidArgument("CudaBackend: layer " + std::to_string(ref.layer) + " of this " + config.architecture +
                          " model has no vector of kind " + std::to_string(static_cast<int>(ref.kind)));
  }
  return v;
}

}  // namespace lio::cuda
