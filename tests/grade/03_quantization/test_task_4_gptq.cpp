// Chapter 03, Task 4: GPTQ's column loop (exercises/03_quantization/gptq.cpp), graded against
// the closed form — the OBS update of one column (Frantar & Alistarh 2022, eq. 3-4) and the
// paper's loop written out here in double — and on what it is for: a lower output error
// tr((W - Q) H (W - Q)^T) than round-to-nearest on the same grid.
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "gptq_awq_helpers.h"
#include "lio/error.h"
#include "lio/quantization.h"

namespace {
using ch03::MatD;

/// W^T as the task's wt: (cols, rows) row-major floats.
std::vector<float> transpose_f(const MatD& w) {
  std::vector<float> wt(static_cast<size_t>(w.size()));
  for (int r = 0; r < w.rows(); ++r)
    for (int c = 0; c < w.cols(); ++c) wt[static_cast<size_t>(c * w.rows() + r)] = static_cast<float>(w(r, c));
  return wt;
}

MatD from_wt(const std::vector<float>& wt, int rows, int cols) {
  MatD w(rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) w(r, c) = wt[static_cast<size_t>(c * rows + r)];
  return w;
}

std::vector<float> flat_f(const MatD& m) {
  std::vector<float> v(static_cast<size_t>(m.size()));
  for (int i = 0; i < m.size(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(m.data()[i]);
  return v;
}

/// The paper's loop (Algorithm 1 without lazy batches), in double: the column values seen
/// before rounding (cols, rows) and the result.
struct Reference {
  MatD seen, q;
};
Reference reference_gptq(const MatD& w0, const MatD& u, const std::vector<double>& scales) {
  MatD w = w0;
  Reference ref{MatD(w.cols(), w.rows()), w};
  for (int j = 0; j < w.cols(); ++j) {
    ref.seen.row(j) = w.col(j).transpose();
    Eigen::VectorXd q(w.rows());
    for (int r = 0; r < w.rows(); ++r) q(r) = ch03::on_grid(w(r, j), scales[static_cast<size_t>(r)]);
    const Eigen::VectorXd err = (w.col(j) - q) / u(j, j);
    for (int k = j + 1; k < w.cols(); ++k) w.col(k) -= err * u(j, k);
    w.col(j) = q;
  }
  ref.q = w;
  return ref;
}

/// Runs the learner's loop with the row grid; records each column as handed to round_column.
MatD run_task(const ch03::Layer& L, const std::vector<double>& scales, MatD* seen = nullptr,
              std::vector<int64_t>* order = nullptr) {
  const int rows = static_cast<int>(L.w.rows()), cols = static_cast<int>(L.w.cols());
  std::vector<float> wt = transpose_f(L.w);
  const std::vector<float> u = flat_f(L.u);
  if (seen) *seen = MatD::Zero(cols, rows);
  lio::gptq_quantize_columns(wt, rows, u, [&](int64_t j, std::span<float> col) {
    if (order) order->push_back(j);
    for (int r = 0; r < rows; ++r) {
      if (seen) (*seen)(j, r) = col[static_cast<size_t>(r)];
      col[static_cast<size_t>(r)] = static_cast<float>(ch03::on_grid(col[static_cast<size_t>(r)], scales[static_cast<size_t>(r)]));
    }
  });
  return from_wt(wt, rows, cols);
}

std::vector<double> scales_of(const MatD& w) {
  std::vector<double> s;
  for (int r = 0; r < w.rows(); ++r) s.push_back(ch03::row_scale(w, r));
  return s;
}

TEST(Ch03Task4, OneColumnIsTheObsClosedForm) {
  // Only column 0 is rounded (the others pass through): the rest must move by
  // -(w_0 - q_0) / [H^-1]_00 * [H^-1]_0k, the optimal compensation for that one rounding.
  const ch03::Layer L = ch03::make_layer(6, 24, 200, 11);
  const int rows = 6, cols = 24;
  const std::vector<double> scales = scales_of(L.w);
  std::vector<float> wt = transpose_f(L.w);
  lio::gptq_quantize_columns(wt, rows, flat_f(L.u), [&](int64_t j, std::span<float> col) {
    if (j == 0)
      for (int r = 0; r < rows; ++r) col[static_cast<size_t>(r)] = static_cast<float>(ch03::on_grid(col[static_cast<size_t>(r)], scales[static_cast<size_t>(r)]));
  });
  const MatD got = from_wt(wt, rows, cols);
  const MatD hinv = L.u.transpose() * L.u;
  for (int r = 0; r < rows; ++r) {
    const double q0 = ch03::on_grid(L.w(r, 0), scales[static_cast<size_t>(r)]);
    EXPECT_NEAR(got(r, 0), q0, 1e-5);
    for (int k = 1; k < cols; ++k) {
      const double want = L.w(r, k) - (L.w(r, 0) - q0) / hinv(0, 0) * hinv(0, k);
      EXPECT_NEAR(got(r, k), want, 1e-3 * (1.0 + std::abs(want))) << "row " << r << " column " << k;
    }
  }
}

TEST(Ch03Task4, EveryColumnMatchesThePapersLoop) {
  const ch03::Layer L = ch03::make_layer(8, 48, 300, 5);
  const std::vector<double> scales = scales_of(L.w);
  const Reference ref = reference_gptq(L.w, L.u, scales);
  MatD seen;
  std::vector<int64_t> order;
  const MatD got = run_task(L, scales, &seen, &order);
  ASSERT_EQ(order.size(), 48u) << "round_column must be called once per column";
  for (int j = 0; j < 48; ++j) EXPECT_EQ(order[static_cast<size_t>(j)], j) << "columns in increasing order";
  // Each column reaches round_column with every earlier column's update applied...
  EXPECT_LT((seen - ref.seen).cwiseAbs().maxCoeff(), 2e-3) << "a column was rounded before all updates reached it";
  // ...and the result is the paper's.
  EXPECT_LT((got - ref.q).cwiseAbs().maxCoeff(), 2e-3);
}

TEST(Ch03Task4, OutputErrorBelowRoundToNearest) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const ch03::Layer L = ch03::make_layer(16, 64, 400, seed);
    const std::vector<double> scales = scales_of(L.w);
    const MatD got = run_task(L, scales);
    const double e_gptq = ch03::output_error(L.w, got, L.h);
    const double e_rtn = ch03::output_error(L.w, ch03::rtn(L.w, scales), L.h);
    EXPECT_LT(e_gptq, 0.8 * e_rtn) << "seed " << seed << ": GPTQ " << e_gptq << ", RTN " << e_rtn;
    // Every value is on its row's grid.
    for (int r = 0; r < got.rows(); ++r)
      for (int c = 0; c < got.cols(); ++c) {
        const double s = scales[static_cast<size_t>(r)];
        EXPECT_NEAR(got(r, c) / s, std::nearbyint(got(r, c) / s), 1e-3);
      }
  }
}

TEST(Ch03Task4, LongerThanOneLazyBlock) {
  // 300 columns: past the paper's 128-column blocks, with a last partial one.
  const ch03::Layer L = ch03::make_layer(4, 300, 600, 9, {0, 150, 299});
  const std::vector<double> scales = scales_of(L.w);
  const Reference ref = reference_gptq(L.w, L.u, scales);
  const MatD got = run_task(L, scales);
  EXPECT_LT((got - ref.q).cwiseAbs().maxCoeff(), 5e-3);
}

TEST(Ch03Task4, BadSizesAreRejected) {
  std::vector<float> wt(12), u(16);
  const lio::RoundColumn none = [](int64_t, std::span<float>) {};
  EXPECT_THROW(lio::gptq_quantize_columns(wt, 5, u, none), lio::InvalidArgument);  // 12 is not cols * 5
  EXPECT_THROW(lio::gptq_quantize_columns(wt, 3, std::span<const float>(u.data(), 9), none),
               lio::InvalidArgument);  // cols = 4 needs 16
}

}  // namespace
