// Chapter 03, Task 4 — reference solution: GPTQ's column loop with the paper's lazy batch
// updates (blocks of 128 columns). Declaration and contract: common/model/include/lio/quantization.h.
#include <algorithm>
#include <string>
#include <vector>

#include "lio/error.h"
#include "lio/quantization.h"

namespace lio {

void gptq_quantize_columns(std::span<float> wt, int64_t rows, std::span<const float> u,
                           const RoundColumn& round_column) {
  const int64_t cols = rows > 0 ? static_cast<int64_t>(wt.size()) / rows : 0;
  if (rows <= 0 || cols * rows != static_cast<int64_t>(wt.size()) || static_cast<int64_t>(u.size()) != cols * cols) {
    throw InvalidArgument("gptq_quantize_columns: wt holds " + std::to_string(wt.size()) + " values for " +
                          std::to_string(rows) + " rows, u " + std::to_string(u.size()));
  }
  constexpr int64_t kBlock = 128;  // lazy batch: updates past the block wait until it is done
  std::vector<float> err(static_cast<size_t>(kBlock * rows));  // (block columns, rows)
  std::vector<float> q(static_cast<size_t>(rows));
  for (int64_t i1 = 0; i1 < cols; i1 += kBlock) {
    const int64_t i2 = std::min(cols, i1 + kBlock);
    for (int64_t j = i1; j < i2; ++j) {
      float* w = wt.data() + j * rows;
      std::copy(w, w + rows, q.begin());
      round_column(j, q);
      const float ujj = u[static_cast<size_t>(j * cols + j)];
      float* e = err.data() + (j - i1) * rows;
      // err = (W[:, j] - q) / U[j, j]; then W[:, j+1 :] -= outer(err, U[j, j+1 :]) (section 3).
      for (int64_t r = 0; r < rows; ++r) e[r] = (w[r] - q[r]) / ujj;
      std::copy(q.begin(), q.end(), w);
      // Inside the block, at once: column k > j gets -U[j][k] * err.
      for (int64_t k = j + 1; k < i2; ++k) {
        const float ujk = u[static_cast<size_t>(j * cols + k)];
        float* wk = wt.data() + k * rows;
        for (int64_t r = 0; r < rows; ++r) wk[r] -= ujk * e[r];
      }
    }
    // Past the block, once: W[:, i2:] -= Err (rows, B) U[i1:i2, i2:] (B, cols - i2).
#pragma omp parallel for schedule(static)
    for (int64_t k = i2; k < cols; ++k) {
      float* wk = wt.data() + k * rows;
      for (int64_t j = i1; j < i2; ++j) {
        const float ujk = u[static_cast<size_t>(j * cols + k)];
        const float* e = err.data() + (j - i1) * rows;
        for (int64_t r = 0; r < rows; ++r) wk[r] -= ujk * e[r];
      }
    }
  }
}

}  // namespace lio
