// Shared by chapter 03's Task 4 and 5 grading tests: a small random layer whose calibration
// inputs have a few loud channels (as real activations do), its H = 2 X^T X / n + damping,
// the upper Cholesky factor of H^-1, a per-row INT4 grid, and the output error the methods
// minimize, tr((W - Q) H (W - Q)^T). Eigen computes the linear algebra; nothing here calls
// the learner's code.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace ch03 {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A layer W (rows, cols) and its calibration inputs X (n, cols).
struct Layer {
  MatD w, x, h, u;  ///< W, X, H, U (H^-1 = U^T U)
};

/// W ~ N(0, 1); X = Z A with Z ~ N(0, 1) (n, cols) and A mixing neighbouring channels (so the
/// inputs are correlated, which is what GPTQ exploits), channels in `loud` scaled by 20.
inline Layer make_layer(int rows, int cols, int n, uint32_t seed, std::vector<int> loud = {3, 17}) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> N(0.0, 1.0);
  Layer L;
  L.w = MatD(rows, cols);
  for (int i = 0; i < L.w.size(); ++i) L.w.data()[i] = N(rng);
  MatD z(n, cols), a = MatD::Identity(cols, cols);
  for (int i = 0; i < z.size(); ++i) z.data()[i] = N(rng);
  for (int c = 0; c + 1 < cols; ++c) a(c, c + 1) = 0.7;
  L.x = z * a;
  for (int c : loud)
    if (c < cols) L.x.col(c) *= 20.0;
  L.h = 2.0 * L.x.transpose() * L.x / n;
  L.h.diagonal().array() += 0.01 * L.h.diagonal().mean();
  const MatD hinv = L.h.llt().solve(MatD::Identity(cols, cols));
  L.u = MatD(hinv.llt().matrixU());
  return L;
}

/// tr(D H D^T), D = W - Q.
inline double output_error(const MatD& w, const MatD& q, const MatD& h) {
  const MatD d = w - q;
  return (d * h).cwiseProduct(d).sum();
}

/// Symmetric INT4 grid of one row: scale = max|w| / 7, codes in [-8, 7].
inline double row_scale(const MatD& w, int r) { return w.row(r).cwiseAbs().maxCoeff() / 7.0; }
/// The grid value nearest v at `scale`.
inline double on_grid(double v, double scale) { return std::clamp(std::nearbyint(v / scale), -8.0, 7.0) * scale; }

/// RTN of W: every weight to its row's grid.
inline MatD rtn(const MatD& w, const std::vector<double>& scales) {
  MatD q = w;
  for (int r = 0; r < w.rows(); ++r)
    for (int c = 0; c < w.cols(); ++c) q(r, c) = on_grid(w(r, c), scales[static_cast<size_t>(r)]);
  return q;
}

}  // namespace ch03
