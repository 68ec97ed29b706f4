// tensor.h — non-owning views of weights as the kernels see them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lio/dtype.h"

namespace lio {

/// A 2-D weight W of shape (rows, cols), row-major: row r is `cols` contiguous elements
/// stored in `dtype` (quantized rows are runs of 32-element blocks). y = W x maps a
/// `cols`-vector to a `rows`-vector, i.e. rows = out_features, cols = in_features.
struct WeightMatrix {
  std::string name;              ///< tensor name in the file, for error messages
  DType dtype = DType::F32;      ///< element or block type of the stored rows
  int64_t rows = 0;              ///< out_features
  int64_t cols = 0;              ///< in_features
  int64_t row_bytes = 0;         ///< dtype_row_bytes(dtype, cols)
  const std::byte* data = nullptr;  ///< (rows, row_bytes) bytes; not owned

  /// First byte of row `r` (unchecked; 0 <= r < rows).
  const std::byte* row(int64_t r) const { return data + r * row_bytes; }
  /// Bytes of the whole matrix: rows * row_bytes.
  int64_t size_bytes() const { return rows * row_bytes; }
};

}  // namespace lio
