// mla.cpp — converting the course model's GQA attention into MLA (chapter 02): MHA2MLA's
// partial RoPE (keep the highest-frequency pairs) and joint SVD of the no-RoPE keys and the
// values (Ji et al. 2025), no training.
#include "lio/mla_conversion.h"

#include <Eigen/Dense>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/cpu_backend.h"
#include "lio/error.h"
#include "lio/forwarding_backend.h"
#include "lio/model_runner.h"

namespace lio {
namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Mat dense(const WeightMatrix& w) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  Mat m(w.rows, w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.dtype, w.row(r), row.data(), w.cols);
    for (int64_t c = 0; c < w.cols; ++c) m(r, c) = row[static_cast<size_t>(c)];
  }
  return m;
}

// An f32 WeightMatrix owning a copy of m (kept alive by `storage`).
WeightMatrix f32_matrix(const Mat& m, const std::string& name, std::vector<std::shared_ptr<const void>>& storage) {
  auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) (*buf)[static_cast<size_t>(r * m.cols() + c)] = static_cast<float>(m(r, c));
  WeightMatrix w;
  w.name = name;
  w.dtype = DType::F32;
  w.rows = m.rows();
  w.cols = m.cols();
  w.row_bytes = dtype_row_bytes(DType::F32, w.cols);
  w.data = reinterpret_cast<const std::byte*>(buf->data());
  storage.push_back(std::shared_ptr<const void>(buf, buf->data()));
  return w;
}

// A CpuBackend that also keeps every layer's attention input (the AttnNorm output): the x
// the K and V projections see, for the calibration PCA.
class CapturingBackend final : public ForwardingBackend {
 public:
  CapturingBackend(const ModelConfig& c, const Weights& w)
      : ForwardingBackend(std::make_unique<CpuBackend>(c, w)), inputs_(static_cast<size_t>(c.n_layers)) {}
  void rmsnorm(const float* x, WeightRef w, float* out, int64_t n) override {
    ForwardingBackend::rmsnorm(x, w, out, n);
    if (w.kind == WeightKind::AttnNorm) {
      auto& dst = inputs_[static_cast<size_t>(w.layer)];
      dst.insert(dst.end(), out, out + n * config().d_model);
    }
  }
  /// Layer l's captured inputs, (n_tokens, d_model) row-major.
  std::vector<float>& inputs(int64_t l) { return inputs_[static_cast<size_t>(l)]; }

 private:
  std::vector<std::vector<float>> inputs_;
};

// Each layer's attention inputs over `tokens`, (n, d_model) per layer.
std::vector<Mat> calibration_inputs(const LoadedModel& m, const std::vector<int32_t>& tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n > m.config.context_length) {
    throw InvalidArgument("convert_to_mla: " + std::to_string(n) + " calibration tokens exceed the context of " +
                          std::to_string(m.config.context_length));
  }
  auto backend = std::make_unique<CapturingBackend>(m.config, m.weights);
  CapturingBackend& cap = *backend;
  ModelRunner runner(std::move(backend), KvPoolConfig{16, (n + 15) / 16});
  SoloSequence seq(runner, n);
  seq.forward(tokens);
  std::vector<Mat> out;
  for (int64_t l = 0; l < m.config.n_layers; ++l) {
    const std::vector<float>& x = cap.inputs(l);
    Mat X(n, m.config.d_model);
    for (int64_t i = 0; i < X.size(); ++i) X.data()[i] = x[static_cast<size_t>(i)];
    out.push_back(std::move(X));
  }
  return out;
}

}  // namespace

int64_t mla_max_rank(const ModelConfig& c, int64_t rope_pairs) {
  return c.n_kv_heads * (2 * c.head_dim - 2 * rope_pairs);
}

void convert_to_mla(LoadedModel& model, const MlaConversion& cv) {
  ModelConfig& c = model.config;
  if (c.is_mla()) throw UnsupportedError("convert_to_mla: " + model.path + " is already an MLA model");
  const int64_t hd = c.head_dim, nkv = c.n_kv_heads, H = c.n_heads, d = c.d_model, k = cv.rope_pairs;
  if (k < 1 || k > hd / 2 - 1) {
    throw InvalidArgument("convert_to_mla: rope_pairs must be in 1 .. " + std::to_string(hd / 2 - 1) + ", got " +
                          std::to_string(k));
  }
  const int64_t dn = hd - 2 * k, dr = nkv * 2 * k, D = mla_max_rank(c, k), r = cv.rank;
  if (r < 2 || r > D || r % 2 != 0) {
    throw InvalidArgument("convert_to_mla: rank must be even and in 2 .. " + std::to_string(D) + ", got " +
                          std::to_string(r));
  }
  // Rows of rotary pair i inside a head: interleaved (GGUF llama) or rotate-half (HF).
  auto pair_rows = [&](int64_t i) {
    return c.rope_style == RopeStyle::Normal ? std::pair<int64_t, int64_t>{2 * i, 2 * i + 1}
                                             : std::pair<int64_t, int64_t>{i, i + hd / 2};
  };
  std::vector<int64_t> nope_rows, rope_rows;  // within a head, in pair order, each pair's two rows
  for (int64_t i = 0; i < hd / 2; ++i) {
    auto [a, b] = pair_rows(i);
    auto& dst = i < k ? rope_rows : nope_rows;  // pair 0 turns fastest: theta^(-2i/hd)
    dst.push_back(a);
    dst.push_back(b);
  }
  const std::vector<Mat> calib =
      cv.calibration_tokens.empty() ? std::vector<Mat>{} : calibration_inputs(model, cv.calibration_tokens);
  Weights& W = model.weights;
  W.mla_rope_inv_freq.clear();
  for (int64_t g = 0; g < nkv; ++g)
    for (int64_t i = 0; i < k; ++i)
      W.mla_rope_inv_freq.push_back(static_cast<float>(std::pow(static_cast<double>(c.rope_theta), -2.0 * i / hd)));

  for (size_t l = 0; l < W.layers.size(); ++l) {
    LayerWeights& L = W.layers[l];
    const Mat wq = dense(L.matrix(WeightKind::Wq)), wk = dense(L.matrix(WeightKind::Wk)),
              wv = dense(L.matrix(WeightKind::Wv));
    // [W_k,nope ; W_v]: every KV head's no-RoPE key rows, then every KV head's value rows.
    Mat joint(D, d), wkr(dr, d);
    for (int64_t g = 0; g < nkv; ++g) {
      for (int64_t j = 0; j < dn; ++j) joint.row(g * dn + j) = wk.row(g * hd + nope_rows[static_cast<size_t>(j)]);
      for (int64_t j = 0; j < hd; ++j) joint.row(nkv * dn + g * hd + j) = wv.row(g * hd + j);
      for (int64_t j = 0; j < 2 * k; ++j) wkr.row(g * 2 * k + j) = wk.row(g * hd + rope_rows[static_cast<size_t>(j)]);
    }
    Mat U, down;  // U: (D, r) up-projection rows; down: (r, d) W_DKV
    if (calib.empty()) {
      // Data-free: the weights' own SVD (MHA2MLA's SVD_joint).
      Eigen::BDCSVD<Mat> svd(joint, Eigen::ComputeThinU | Eigen::ComputeThinV);
      U = svd.matrixU().leftCols(r);
      down = svd.singularValues().head(r).asDiagonal() * svd.matrixV().leftCols(r).transpose();
    } else {
      // PCA of the K/V rows the layer produces on the calibration text, keys scaled by a to
      // the values' norm so neither dominates the principal directions (TransMLA's balancing).
      const Mat& X = calib[l];                            // (n, d)
      Mat Y = X * joint.transpose();                      // (n, D): [K_nope | V] per token
      const double k_norm = Y.leftCols(nkv * dn).norm(), v_norm = Y.rightCols(nkv * hd).norm();
      const double a = k_norm > 0.0 ? v_norm / k_norm : 1.0;
      Y.leftCols(nkv * dn) *= a;
      Eigen::SelfAdjointEigenSolver<Mat> eig(Y.transpose() * Y);  // ascending eigenvalues
      const Mat Ub = eig.eigenvectors().rightCols(r).rowwise().reverse();  // (D, r), largest first
      Mat scaled = joint;
      scaled.topRows(nkv * dn) *= a;
      down = Ub.transpose() * scaled;  // c = U_b^T [a W_k,nope ; W_v] x
      U = Ub;
      U.topRows(nkv * dn) /= a;        // K_nope = (U_b,K / a) c
    }
    Mat wkv_a(r + dr, d), wk_b(H * dn, r), wv_b(H * hd, r), wq_new = Mat::Zero(H * (dn + dr), d);
    wkv_a.topRows(r) = down;
    wkv_a.bottomRows(dr) = wkr;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / nkv);
      wk_b.middleRows(h * dn, dn) = U.middleRows(g * dn, dn);
      wv_b.middleRows(h * hd, hd) = U.middleRows(nkv * dn + g * hd, hd);
      for (int64_t j = 0; j < dn; ++j) wq_new.row(h * (dn + dr) + j) = wq.row(h * hd + nope_rows[static_cast<size_t>(j)]);
      for (int64_t j = 0; j < 2 * k; ++j)
        wq_new.row(h * (dn + dr) + dn + g * 2 * k + j) = wq.row(h * hd + rope_rows[static_cast<size_t>(j)]);
    }
    const std::string p = "blk." + std::to_string(l) + ".";
    L.matrix(WeightKind::Wq) = f32_matrix(wq_new, p + "attn_q (MLA)", W.storage);
    L.matrix(WeightKind::WkvA) = f32_matrix(wkv_a, p + "attn_kv_a (MLA, SVD)", W.storage);
    L.matrix(WeightKind::WkB) = f32_matrix(wk_b, p + "attn_k_b (MLA, SVD)", W.storage);
    L.matrix(WeightKind::WvB) = f32_matrix(wv_b, p + "attn_v_b (MLA, SVD)", W.storage);
    L.matrix(WeightKind::Wk) = WeightMatrix{};
    L.matrix(WeightKind::Wv) = WeightMatrix{};
  }
  c.kv_lora_rank = r;
  c.qk_nope_head_dim = dn;
  c.qk_rope_head_dim = dr;
  c.v_head_dim = hd;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));  // the GQA model's scale
  c.validate(model.path + " (converted to MLA)");
}

}  // namespace lio
