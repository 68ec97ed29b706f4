// quantized_kv.h — one layer of an f16 or int8 paged KV pool as stored (chapter 03's quantized KV
// cache): what kv_append_quantized() writes and paged_attention_quantized() reads.
#pragma once

namespace lio::cuda {

/// Element type of a quantized KV pool layer (--kv-cache-dtype f16 | int8; f32 pools take
/// kv_append() and paged_attention()).
enum class KvQuant {
  F16,   ///< IEEE halves (uint16_t bits), round to nearest even
  Int8,  ///< int8 codes, one f32 scale per (slot, KV head): element = scale * code
};

/// One layer of an f16 or int8 paged KV pool as stored; device pointers.
///   k, v: (n_slots, n_kv_heads, head_dim) uint16_t f16 bits (F16) or int8_t codes (Int8);
///   k_scales, v_scales: (n_slots, n_kv_heads) f32 for Int8, nullptr for F16.
/// The layout of HostKvPool's key_data() / key_scales(), so the CPU and CUDA pools agree.
struct QuantizedKvLayer {
  KvQuant type = KvQuant::F16;  ///< element type
  void* k = nullptr;            ///< keys, (n_slots, n_kv_heads, head_dim) elements
  void* v = nullptr;            ///< values, laid out as k
  float* k_scales = nullptr;    ///< Int8: (n_slots, n_kv_heads) key scales; F16: nullptr
  float* v_scales = nullptr;    ///< Int8: the values' scales, laid out as k_scales
};

}  // namespace lio::cuda
