// calibrated_quant.cpp — calibration statistics, GPTQ and AWQ (see lio/calibrated_quant.h).
#include "lio/calibrated_quant.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/forwarding_backend.h"
#include "lio/model_runner.h"

namespace lio {
namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The input a matmul of `kind` reads, or -1 for one calibration ignores (the LM head, MLA's
/// up-projections, and the layers sharing another's input: W_k, W_v, W_kv_a, W_up).
int input_of(WeightKind kind) {
  switch (kind) {
    case WeightKind::Wq: return static_cast<int>(LinearInput::Attn);
    case WeightKind::Wo: return static_cast<int>(LinearInput::AttnOut);
    case WeightKind::Gate: return static_cast<int>(LinearInput::Ffn);
    case WeightKind::Down: return static_cast<int>(LinearInput::FfnDown);
    default: return -1;
  }
}

/// A CpuBackend that adds each calibrated matmul's input rows to its layer's InputStats.
class CalibratingBackend final : public ForwardingBackend {
 public:
  CalibratingBackend(const ModelConfig& c, const Weights& w, CalibrationStats& stats)
      : ForwardingBackend(std::make_unique<CpuBackend>(c, w)), stats_(stats) {
    const std::array<int64_t, kLinearInputs> dims = {c.d_model, c.attn_out_dim(), c.d_model, c.d_ff};
    stats_.layers.resize(static_cast<size_t>(c.n_layers));
    for (auto& layer : stats_.layers) {
      for (int i = 0; i < kLinearInputs; ++i) {
        InputStats& s = layer[static_cast<size_t>(i)];
        s.dim = dims[static_cast<size_t>(i)];
        s.xtx.assign(static_cast<size_t>(s.dim * s.dim), 0.0);
        s.abs_sum.assign(static_cast<size_t>(s.dim), 0.0);
        s.abs_max.assign(static_cast<size_t>(s.dim), 0.0f);
      }
    }
  }
  void matmul(WeightRef w, const float* x, float* y, int64_t n, bool acc) override {
    const int in = input_of(w.kind);
    if (in >= 0 && w.layer >= 0) {
      InputStats& s = stats_.layers[static_cast<size_t>(w.layer)][static_cast<size_t>(in)];
      const Eigen::Map<const MatF> X(x, n, s.dim);
      const MatF g = X.transpose() * X;  // (dim, dim), one chunk in f32, summed in f64
      Eigen::Map<MatD> xtx(s.xtx.data(), s.dim, s.dim);
      xtx += g.cast<double>();
      const Eigen::RowVectorXf a = X.cwiseAbs().colwise().sum();
      const Eigen::RowVectorXf m = X.cwiseAbs().colwise().maxCoeff();
      for (int64_t c = 0; c < s.dim; ++c) {
        s.abs_sum[static_cast<size_t>(c)] += a(c);
        s.abs_max[static_cast<size_t>(c)] = std::max(s.abs_max[static_cast<size_t>(c)], m(c));
      }
      s.n_tokens += n;
    }
    ForwardingBackend::matmul(w, x, y, n, acc);
  }

 private:
  CalibrationStats& stats_;
};

/// tr(D H D^T) for D (rows, cols) and H (cols, cols), in f32 with a f64 sum.
double trace_dhd(const MatF& d, const MatF& h) {
  const MatF dh = d * h;
  double sum = 0.0;
  for (Eigen::Index r = 0; r < d.rows(); ++r) sum += static_cast<double>(dh.row(r).dot(d.row(r)));
  return sum;
}

void check_finite(const float* w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(w[i])) throw InvalidArgument("quantize: non-finite weight at index " + std::to_string(i));
  }
}

}  // namespace

std::vector<float> InputStats::mean_abs() const {
  std::vector<float> m(abs_sum.size(), 0.0f);
  if (n_tokens == 0) return m;
  for (size_t c = 0; c < m.size(); ++c) m[c] = static_cast<float>(abs_sum[c] / static_cast<double>(n_tokens));
  return m;
}

CalibrationStats collect_calibration(const LoadedModel& m, std::span<const int32_t> tokens, int32_t bos_id,
                                     int64_t n_ctx, int64_t n_chunks,
                                     const std::function<void(int64_t, int64_t)>& on_chunk) {
  const auto n_text = static_cast<int64_t>(tokens.size());
  if (n_ctx < 2 || n_ctx > m.config.context_length) {
    throw InvalidArgument("calibration: chunks of " + std::to_string(n_ctx) + " tokens; want 2 .. " +
                          std::to_string(m.config.context_length));
  }
  if (n_chunks == 0) throw InvalidArgument("calibration: --calib-chunks must be > 0 (or -1 for all)");
  if (n_text < n_ctx) {
    throw InvalidArgument("calibration: the text tokenizes to " + std::to_string(n_text) +
                          " tokens, fewer than one chunk of " + std::to_string(n_ctx));
  }
  CalibrationStats stats;
  stats.n_chunks = n_chunks < 0 ? n_text / n_ctx : std::min(n_chunks, n_text / n_ctx);
  ModelRunner runner(std::make_unique<CalibratingBackend>(m.config, m.weights, stats),
                     KvPoolConfig{16, (n_ctx + 15) / 16});
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  for (int64_t i = 0; i < stats.n_chunks; ++i) {
    std::copy_n(tokens.begin() + i * n_ctx, n_ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    SoloSequence seq(runner, n_ctx);
    seq.forward(chunk);
    stats.n_tokens += n_ctx;
    if (on_chunk) on_chunk(i + 1, stats.n_chunks);
  }
  return stats;
}

double output_error(const float* w, const float* q, int64_t rows, int64_t cols, std::span<const double> xtx) {
  if (static_cast<int64_t>(xtx.size()) != cols * cols) {
    throw InvalidArgument("output_error: xtx holds " + std::to_string(xtx.size()) + " values for " +
                          std::to_string(cols) + " columns");
  }
  const MatF d = Eigen::Map<const MatF>(q, rows, cols) - Eigen::Map<const MatF>(w, rows, cols);
  return trace_dhd(d, Eigen::Map<const MatD>(xtx.data(), cols, cols).cast<float>());
}

QuantizedMatrix gptq_quantize(const QuantGrid& g, const float* w, int64_t rows, int64_t cols, const InputStats& stats,
                              const GptqOptions& o) {
  if (stats.dim != cols || static_cast<int64_t>(stats.xtx.size()) != cols * cols) {
    throw InvalidArgument("gptq: calibration statistics of width " + std::to_string(stats.dim) + " for a matrix of " +
                          std::to_string(cols) + " columns");
  }
  if (stats.n_tokens <= 0) throw InvalidArgument("gptq: no calibration tokens");
  check_finite(w, rows * cols);
  QuantizedMatrix out(g, rows, cols);
  const int64_t G = g.group_cols(cols);  // per-channel: one group, its scale set at j = 0 from W

  MatD h = Eigen::Map<const MatD>(stats.xtx.data(), cols, cols) * (2.0 / static_cast<double>(stats.n_tokens));
  MatF wf = Eigen::Map<const MatF>(w, rows, cols);
  for (int64_t c = 0; c < cols; ++c) {
    if (h(c, c) == 0.0) {  // a dead input: nothing to preserve
      h(c, c) = 1.0;
      wf.col(c).setZero();
    }
  }
  // Column order: natural, or by decreasing H_cc (act-order).
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h(a, a) > h(b, b); });
  }
  MatD hp(cols, cols);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) hp(i, j) = h(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  hp.diagonal().array() += o.damp * hp.diagonal().mean();

  // U: upper Cholesky factor of H^-1 (H^-1 = U^T U), as the reference code's
  // cholesky(cholesky_inverse(cholesky(H)), upper=True).
  const Eigen::LLT<MatD> llt(hp);
  if (llt.info() != Eigen::Success) {
    throw InvalidArgument("gptq: H + damping is not positive definite; raise --damp (now " + std::to_string(o.damp) + ")");
  }
  const MatD hinv = llt.solve(MatD::Identity(cols, cols));
  const Eigen::LLT<MatD> llt_inv(hinv);
  if (llt_inv.info() != Eigen::Success) {
    throw InvalidArgument("gptq: H^-1 has no Cholesky factor; raise --damp (now " + std::to_string(o.damp) + ")");
  }
  const MatF u = MatD(llt_inv.matrixU()).cast<float>();

  // W^T in processing order: row j = original column perm[j].
  std::vector<float> wt(static_cast<size_t>(cols * rows));
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t r = 0; r < rows; ++r) wt[static_cast<size_t>(j * rows + r)] = wf(r, perm[static_cast<size_t>(j)]);

  std::vector<float> group_vals;
  if (o.act_order) {  // static groups, from the weights before any update
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < cols; c0 += G) {
        const int64_t c1 = std::min(cols, c0 + G);
        group_vals.assign(wf.row(r).data() + c0, wf.row(r).data() + c1);
        out.group(r, c0) = grid_params(g, group_vals);
      }
  }
  const RoundColumn round = [&](int64_t j, std::span<float> col) {
    const int64_t oc = perm[static_cast<size_t>(j)];
    if (!o.act_order && oc % G == 0) {  // a group starts: its scale from the updated weights
      const int64_t c1 = std::min(cols, oc + G);
      for (int64_t r = 0; r < rows; ++r) {
        group_vals.resize(static_cast<size_t>(c1 - oc));
        group_vals[0] = col[static_cast<size_t>(r)];
        for (int64_t c = oc + 1; c < c1; ++c) group_vals[static_cast<size_t>(c - oc)] = wt[static_cast<size_t>(c * rows + r)];
        out.group(r, oc) = grid_params(g, group_vals);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const GroupParams& p = out.group(r, oc);
      const int q = grid_code(g, p, col[static_cast<size_t>(r)]);
      out.codes[static_cast<size_t>(r * cols + oc)] = static_cast<int8_t>(q);
      col[static_cast<size_t>(r)] = grid_value(p, q);
    }
  };
  gptq_quantize_columns(wt, rows, std::span<const float>(u.data(), static_cast<size_t>(u.size())), round);
  return out;
}

AwqSearch awq_scales(const QuantGrid& g, std::span<const AwqMatrix> mats, const InputStats& stats, int n_grid) {
  const int64_t cols = stats.dim;
  if (static_cast<int64_t>(stats.xtx.size()) != cols * cols || mats.empty()) {
    throw InvalidArgument("awq: calibration statistics of width " + std::to_string(cols) + " for " +
                          std::to_string(mats.size()) + " matrices");
  }
  for (const AwqMatrix& m : mats) check_finite(m.w, m.rows * cols);
  const MatF h = Eigen::Map<const MatD>(stats.xtx.data(), cols, cols).cast<float>();
  const std::vector<float> mean_abs = stats.mean_abs();
  MatF ws;
  const auto loss = [&](std::span<const float> s) {
    const Eigen::Map<const Eigen::RowVectorXf> sv(s.data(), cols);
    double total = 0.0;
    for (const AwqMatrix& m : mats) {
      const Eigen::Map<const MatF> w(m.w, m.rows, cols);
      ws = w.array().rowwise() * sv.array();
      const std::vector<float> q = rtn_quantize(g, ws.data(), m.rows, cols).dequantized();
      const MatF d = Eigen::Map<const MatF>(q.data(), m.rows, cols).array().rowwise() / sv.array() - w.array();
      total += trace_dhd(d, h);
    }
    return total;
  };
  return awq_search_scales(mean_abs, n_grid, loss);
}

}  // namespace lio
