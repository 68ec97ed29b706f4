// cuda_backend_sampling.cpp — greedy sampling on the device: the repetition penalty and the
// argmax run where the logits are, and only each row's ArgmaxRow (12 bytes) comes back.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_backend_impl.h"
#include "cuda_check.h"
#include "lio/error.h"
#include "sampling.h"

namespace lio::cuda {

// ---- greedy sampling ------------------------------------------------------------------------

std::vector<ArgmaxRow> CudaBackend::greedy_argmax(
    float* logits, std::span<const int32_t> rows,
    const std::vector<std::vector<int32_t>>& penalty_tokens, std::span<const float> penalties) {
  Impl& m = *impl_;
  const int64_t vocab = m.config.vocab_size;
  const auto n_rows = static_cast<int64_t>(rows.size());
  if (penalty_tokens.size() != rows.size() || penalties.size() != rows.size()) {
    throw InvalidArgument("CudaBackend::greedy_argmax: " + std::to_string(rows.size()) + " rows, " +
                          std::to_string(penalty_tokens.size()) + " penalty token lists, " +
                          std::to_string(penalties.size()) + " penalties");
  }
  if (n_rows > 0 && logits == nullptr)
    throw InvalidArgument("CudaBackend::greedy_argmax: null logits");
  // Checked on the host before anything runs: a bad row or id would index past the logits.
  int64_t n_penalized = 0;
  for (int64_t i = 0; i < n_rows; ++i) {
    const int32_t row = rows[static_cast<size_t>(i)];
    if (row < 0 || row >= m.n_logits) {
      throw InvalidArgument("CudaBackend::greedy_argmax: row " + std::to_string(row) +
                            " outside the last batch's " + std::to_string(m.n_logits) +
                            " logits rows");
    }
    for (const int32_t id : penalty_tokens[static_cast<size_t>(i)]) {
      if (id < 0 || id >= vocab) {
        throw InvalidArgument("CudaBackend::greedy_argmax: penalized token id " +
                              std::to_string(id) + " outside [0, " + std::to_string(vocab) + ")");
      }
    }
    n_penalized += static_cast<int64_t>(penalty_tokens[static_cast<size_t>(i)].size());
  }
  return m.guarded([&] {
    std::vector<ArgmaxRow> out(static_cast<size_t>(n_rows));
    if (n_rows == 0) return out;
    cudaStream_t s = m.stream;
    // The last wait (to_host / greedy_argmax) or the guard's drain finished every copy from
    // these staging arrays, so they may be rewritten and grown now.
    // No graph holds them: growing one (a longer penalty list than reserve() sized) costs one
    // sync, never the graphs (issue 60, defect 4).
    m.grow_outside_graphs(m.penalty_tokens_h, n_penalized);
    m.grow_outside_graphs(m.argmax_h, n_rows);
    m.grow_outside_graphs(m.penalty_tokens_d, n_penalized);
    m.grow_outside_graphs(m.argmax_d, n_rows);
    int64_t offset = 0;
    for (const auto& ids : penalty_tokens) {
      std::copy(ids.begin(), ids.end(), m.penalty_tokens_h.data() + offset);
      offset += static_cast<int64_t>(ids.size());
    }
    // One argmax launch covers consecutive rows (the common case: one logits row per sequence).
    bool consecutive = true;
    for (int64_t i = 1; i < n_rows; ++i) consecutive &= rows[static_cast<size_t>(i)] == rows[0] + i;
    m.op("sampling (penalty + argmax)", [&] {
      if (n_penalized > 0) {
        CUDA_CHECK(cudaMemcpyAsync(m.penalty_tokens_d.data(), m.penalty_tokens_h.data(),
                                   static_cast<size_t>(n_penalized) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s));
      }
      int64_t at = 0;
      for (int64_t i = 0; i < n_rows; ++i) {
        const auto& ids = penalty_tokens[static_cast<size_t>(i)];
        const float penalty = penalties[static_cast<size_t>(i)];
        float* row = logits + static_cast<int64_t>(rows[static_cast<size_t>(i)]) * vocab;
        if (penalty != 1.0f && !ids.empty()) {  // a penalty of 1 leaves every logit as it is
          repeat_penalty(row, m.penalty_tokens_d.data() + at, static_cast<int64_t>(ids.size()),
                         penalty, s);
        }
        at += static_cast<int64_t>(ids.size());
        if (!consecutive) argmax(row, m.argmax_d.data() + i, 1, vocab, s);
      }
      if (consecutive)
        argmax(logits + static_cast<int64_t>(rows[0]) * vocab, m.argmax_d.data(), n_rows, vocab, s);
    });
    m.op("argmax to host", [&] {
      CUDA_CHECK(cudaMemcpyAsync(m.argmax_h.data(), m.argmax_d.data(),
                                 static_cast<size_t>(n_rows) * sizeof(ArgmaxResult),
                                 cudaMemcpyDeviceToHost, s));
    });
    m.wait();
    for (int64_t i = 0; i < n_rows; ++i) {
      const ArgmaxResult& r = m.argmax_h.data()[i];
      out[static_cast<size_t>(i)] = ArgmaxRow{r.index, r.n_invalid, r.n_masked};
    }
    return out;
  });
}

}  // namespace lio::cuda
