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
    for (size_t k = 0; k < kWeightKindCount;
         ++k) {  // what the family's table bound (lio/architecture.h)
      if (L.matrices[k].data != nullptr) d.matrices[k] = m.upload(L.matrices[k]);
      if (!L.vectors[k].empty()) d.vectors[k] = m.upload(L.vectors[k]);
    }
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
  if (ref.kind == WeightKind::TokenEmbd) return token_embd;
  if (ref.kind == WeightKind::Output) return output;
  if (!is_matrix(ref.kind)) {
    throw InvalidArgument("CudaBackend::matmul: weight kind " +
                          std::string(weight_kind_name(ref.kind)) + " is not a matrix");
  }
  return layer(ref).matrices[index_of(ref.kind)];
}

const float* CudaBackend::Impl::vector(WeightRef ref) const {
  if (ref.kind == WeightKind::OutputNorm) return output_norm;
  if (is_matrix(ref.kind)) {
    throw InvalidArgument("CudaBackend: weight kind " + std::string(weight_kind_name(ref.kind)) +
                          " is not a norm or bias");
  }
  const float* v = layer(ref).vectors[index_of(ref.kind)];
  if (v == nullptr) {
    throw InvalidArgument("CudaBackend: layer " + std::to_string(ref.layer) + " of this " +
                          config.architecture + " model has no " +
                          std::string(weight_kind_name(ref.kind)));
  }
  return v;
}

}  // namespace lio::cuda
