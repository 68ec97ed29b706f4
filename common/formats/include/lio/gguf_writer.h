// gguf_writer.h — builds GGUF v3 files (tiny test models, quantized copies of a model).
//
// Source: the GGUF specification, ggml repository docs/gguf.md; the layout is summed up in
// lio/gguf.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lio/dtype.h"
#include "lio/gguf.h"

namespace lio {

/// Builds a GGUF v3 file in memory and writes it. Used by tests (tiny random models)
/// and tools. Tensor data is copied in; shapes are row-major as in GgufTensorInfo.
class GgufWriter {
 public:
  /// Sets metadata `key` to `value`, replacing an earlier value (keys keep first-set order).
  /// Throws InvalidArgument if `data` does not match `type` (or an integer overflows it),
  /// an array item's type differs from its element type, arrays nest deeper than 8, or
  /// `general.alignment` is not a u32 power of two in 1..2^30.
  void set(const std::string& key, GgufValue value);
  /// Adds a tensor; `data` must hold dtype_row_bytes(dtype, n_elems) bytes.
  /// Throws InvalidArgument on a duplicate name or a wrong byte count.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                  std::span<const std::byte> data);
  /// Convenience: quantizes f32 values into `dtype` with quantize_row, row by row.
  void add_tensor_f32(const std::string& name, DType dtype, std::vector<int64_t> shape,
                      std::span<const float> values);
  /// Serialized file bytes (version 3, alignment 32 unless `general.alignment` is set).
  std::vector<std::byte> serialize() const;
  /// Writes serialize() to `path` atomically (AtomicFileWriter: a temporary, then rename; a kill
  /// mid-write leaves no half file). Throws InvalidArgument if it cannot be written.
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace lio
