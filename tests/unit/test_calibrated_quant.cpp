// Chapter 03's calibrated quantization: grids and their llama.cpp containers (lio/quant_grid.h),
// calibration statistics collected by running the engine, GPTQ and AWQ on random layers and
// on the tiny model through lio quantize (lio/calibrated_quant.h, lio/quantize.h).
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "lio/calibrated_quant.h"
#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/model_loader.h"
#include "lio/model_runner.h"
#include "lio/quantize.h"
#include "tiny_model.h"

namespace {

using lio::DType;
using lio::QuantGrid;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<float> normal(int64_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = N(rng);
  return v;
}

TEST(QuantGrid, EveryGridRoundTripsThroughItsLlamaCppContainer) {
  const int64_t rows = 3, cols = 160;  // 1.25 groups of 128: a short last group
  std::vector<float> w = normal(rows * cols, 7, 0.05f);
  w[17] = 0.9f;   // an outlier
  w[200] = -1.1f;
  for (const QuantGrid g : {QuantGrid{8, 32, false}, QuantGrid{4, 32, false}, QuantGrid{4, 128, false},
                            QuantGrid{4, 64, true}, QuantGrid{3, 128, false}, QuantGrid{3, 32, true},
                            QuantGrid{3, 128, false, true}, QuantGrid{3, 32, true, true},
                            QuantGrid{8, lio::kPerChannel, false}, QuantGrid{4, lio::kPerChannel, true}}) {
    const lio::QuantizedMatrix q = lio::rtn_quantize(g, w.data(), rows, cols);
    const DType t = lio::grid_container(g);
    std::vector<std::byte> row(static_cast<size_t>(lio::dtype_row_bytes(t, cols)));
    std::vector<float> back(static_cast<size_t>(cols));
    std::set<int> levels;
    for (int64_t r = 0; r < rows; ++r) {
      q.encode_row(r, row.data());
      lio::dequantize_row(t, row.data(), back.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        const int code = q.codes[static_cast<size_t>(r * cols + c)];
        levels.insert(code);
        ASSERT_GE(code, g.qmin()) << g.name();
        ASSERT_LE(code, g.qmax()) << g.name();
        // llama.cpp's dequantization of the stored block is exactly the grid value.
        ASSERT_EQ(back[static_cast<size_t>(c)], q.value(r, c)) << g.name() << " (" << r << ", " << c << ")";
        // Round to nearest: within half a step (plus f16 rounding of the scale); a code at
        // the edge may be clipped by up to a step (Q4_0's rule maps the largest magnitude to
        // qmin, so the other sign reaches only qmax = -qmin - 1).
        const lio::GroupParams& p = q.group(r, c);
        const float steps = code == g.qmin() || code == g.qmax() ? 1.0f : 0.5f;
        EXPECT_LE(std::fabs(w[static_cast<size_t>(r * cols + c)] - q.value(r, c)), steps * std::fabs(p.scale) * 1.01f + 1e-6f)
            << g.name();
      }
    }
    EXPECT_LE(static_cast<int>(levels.size()), g.qmax() - g.qmin() + 1) << g.name();
    if (g.bits == 3) {
      EXPECT_GT(static_cast<int>(levels.size()), 4) << g.name();
    }
  }
}

// 3 bits go to LIO's packed blocks (3.5 / 4 bits per weight) unless llama.cpp's Q4 blocks are
// asked for; 8 and 4 bits always use llama.cpp's types.
TEST(QuantGrid, ContainersByBitsSymmetryAndLlamaBlocks) {
  EXPECT_EQ(lio::grid_container(QuantGrid{3, 128, false}), DType::Q3_0);
  EXPECT_EQ(lio::grid_container(QuantGrid{3, 32, true}), DType::Q3_1);
  EXPECT_EQ(lio::grid_container(QuantGrid{3, 128, false, true}), DType::Q4_0);
  EXPECT_EQ(lio::grid_container(QuantGrid{3, 32, true, true}), DType::Q4_1);
  EXPECT_EQ(lio::grid_container(QuantGrid{4, 64, true}), DType::Q4_1);
  EXPECT_EQ(lio::grid_container(QuantGrid{8, 32, false, true}), DType::Q8_0);
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q3_0, 576), 18 * 14);  // 3.5 bits per weight
  EXPECT_EQ(lio::dtype_row_bytes(DType::Q3_1, 576), 18 * 16);  // 4 bits per weight
}

TEST(QuantGrid, PerChannelIsOneScalePerRowRepeatedInEveryBlock) {
  const int64_t rows = 4, cols = 96;
  std::vector<float> w = normal(rows * cols, 9, 0.05f);
  w[3 * cols + 70] = 2.0f;  // row 3's largest weight, in its third block
  const QuantGrid g{8, lio::kPerChannel, false};
  EXPECT_EQ(g.name(), "int8 per-channel sym");
  const lio::QuantizedMatrix q = lio::rtn_quantize(g, w.data(), rows, cols);
  ASSERT_EQ(q.groups(), 1);
  ASSERT_EQ(q.params.size(), static_cast<size_t>(rows));
  EXPECT_EQ(q.params[3].scale, lio::f16_to_f32(lio::f32_to_f16(2.0f / 127.0f)));
  EXPECT_EQ(q.codes[static_cast<size_t>(3 * cols + 70)], 127);
  std::vector<lio::BlockQ8_0> blocks(static_cast<size_t>(cols / 32));
  for (int64_t r = 0; r < rows; ++r) {
    q.encode_row(r, reinterpret_cast<std::byte*>(blocks.data()));
    for (const lio::BlockQ8_0& b : blocks) EXPECT_EQ(b.d, blocks[0].d) << "row " << r;
  }
}

TEST(QuantGrid, RejectsWhatNoContainerHolds) {
  EXPECT_THROW(lio::check_grid({2, 32, false}), lio::UnsupportedError);
  EXPECT_THROW(lio::check_grid({4, 96, false}), lio::UnsupportedError);
  EXPECT_THROW(lio::check_grid({8, 32, true}), lio::UnsupportedError);
  EXPECT_THROW(lio::QuantizedMatrix({4, 32, false}, 2, 48), lio::InvalidArgument);  // 48 is not a multiple of 32
  std::vector<float> w(64, 0.0f);
  w[5] = NAN;
  EXPECT_THROW(lio::rtn_quantize({4, 32, false}, w.data(), 2, 32), lio::InvalidArgument);
}

/// InputStats of the rows of X (n, cols).
lio::InputStats stats_of(const MatD& x) {
  lio::InputStats s;
  s.dim = x.cols();
  s.n_tokens = x.rows();
  const MatD xtx = x.transpose() * x;
  s.xtx.assign(xtx.data(), xtx.data() + xtx.size());
  for (int64_t c = 0; c < s.dim; ++c) s.abs_sum.push_back(x.col(c).cwiseAbs().sum());
  return s;
}

/// A layer W (rows, cols) and correlated inputs X (n, cols) with two loud channels.
struct Layer {
  std::vector<float> w;
  MatD x;
};
Layer make_layer(int64_t rows, int64_t cols, int64_t n, uint32_t seed) {
  Layer L{normal(rows * cols, seed, 0.05f), MatD(n, cols)};
  const std::vector<float> z = normal(n * cols, seed + 100);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c)
      L.x(i, c) = z[static_cast<size_t>(i * cols + c)] + (c > 0 ? 0.8 * z[static_cast<size_t>(i * cols + c - 1)] : 0.0);
  L.x.col(5) *= 25.0;
  L.x.col(cols - 3) *= 10.0;
  return L;
}

TEST(Gptq, LowersTheOutputErrorBelowRtnOnEveryGrid) {
  const int64_t rows = 24, cols = 192;
  const Layer L = make_layer(rows, cols, 512, 3);
  const lio::InputStats st = stats_of(L.x);
  for (const QuantGrid g : {QuantGrid{4, 32, false}, QuantGrid{4, 128, true}, QuantGrid{3, 64, false},
                            QuantGrid{4, lio::kPerChannel, false}}) {
    for (bool act_order : {false, true}) {
      const lio::QuantizedMatrix q = lio::gptq_quantize(g, L.w.data(), rows, cols, st, {0.01, act_order});
      const std::vector<float> rtn = lio::rtn_quantize(g, L.w.data(), rows, cols).dequantized();
      const double e_rtn = lio::output_error(L.w.data(), rtn.data(), rows, cols, st.xtx);
      const double e = lio::output_error(L.w.data(), q.dequantized().data(), rows, cols, st.xtx);
      EXPECT_LT(e, 0.8 * e_rtn) << g.name() << (act_order ? " act-order" : "") << ": " << e << " vs RTN " << e_rtn;
    }
  }
}

TEST(Gptq, DeadInputsGetZeroWeightAndBadStatsAreRejected) {
  const int64_t rows = 4, cols = 64;
  Layer L = make_layer(rows, cols, 128, 4);
  L.x.col(10).setZero();  // no token ever drives input 10
  const lio::InputStats st = stats_of(L.x);
  const lio::QuantizedMatrix q = lio::gptq_quantize({4, 32, false}, L.w.data(), rows, cols, st);
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(q.value(r, 10), 0.0f);
  lio::InputStats wrong = st;
  wrong.dim = 32;
  EXPECT_THROW(lio::gptq_quantize({4, 32, false}, L.w.data(), rows, cols, wrong), lio::InvalidArgument);
  lio::InputStats none = st;
  none.n_tokens = 0;
  EXPECT_THROW(lio::gptq_quantize({4, 32, false}, L.w.data(), rows, cols, none), lio::InvalidArgument);
}

TEST(Awq, ScalesNeverLoseToRtnAndHelpWithLoudChannels) {
  const int64_t cols = 128;
  const Layer a = make_layer(16, cols, 512, 5), b = make_layer(8, cols, 512, 6);
  const lio::InputStats st = stats_of(a.x);
  const std::vector<lio::AwqMatrix> mats = {{a.w.data(), 16}, {b.w.data(), 8}};
  const QuantGrid g{3, 128, false};
  const lio::AwqSearch s = lio::awq_scales(g, mats, st, 20);
  double e_rtn = 0.0;
  for (const lio::AwqMatrix& m : mats) {
    const std::vector<float> q = lio::rtn_quantize(g, m.w, m.rows, cols).dequantized();
    e_rtn += lio::output_error(m.w, q.data(), m.rows, cols, st.xtx);
  }
  EXPECT_LT(s.loss, 0.95 * e_rtn);
  EXPECT_GT(s.alpha, 0.0);
  ASSERT_EQ(static_cast<int64_t>(s.scales.size()), cols);
  EXPECT_GT(s.scales[5], s.scales[20]);  // the loud channel is scaled up
}

/// The tiny model and a calibration text (real English from Debian's base-files).
struct TinySetup {
  std::string dir, model, text;
  lio::testing::TinyModelSpec spec;
};
TinySetup tiny_setup(const std::string& tag) {
  TinySetup t;
  t.dir = lio::testing::make_temp_dir(tag);
  t.model = t.dir + "/m.gguf";
  lio::testing::write_tiny_gguf(t.model, t.spec);
  t.text = "/usr/share/common-licenses/GFDL-1.3";
  return t;
}

TEST(Calibration, FirstLayerStatisticsAreTheNormalizedEmbeddings) {
  const TinySetup t = tiny_setup("lio_calib_stats");
  if (!std::filesystem::exists(t.text)) GTEST_SKIP() << t.text << " missing";
  const lio::LoadedModel m = lio::load_model(t.model, lio::WeightMode::AsStored);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % m.config.vocab_size));
  const lio::CalibrationStats s = lio::collect_calibration(m, tokens, /*bos_id=*/-1, 32, -1);
  EXPECT_EQ(s.n_chunks, 3);  // 100 / 32, the rest dropped
  EXPECT_EQ(s.n_tokens, 96);
  ASSERT_EQ(static_cast<int64_t>(s.layers.size()), t.spec.n_layers);
  EXPECT_EQ(s.at(1, lio::LinearInput::FfnDown).dim, t.spec.d_ff);
  EXPECT_EQ(s.at(1, lio::LinearInput::FfnDown).n_tokens, 96);
  // Layer 0's attention input is RMSNorm(embedding) * attn_norm: recompute it from the file.
  const lio::GgufFile f = lio::GgufFile::open(t.model);
  const auto* embd = reinterpret_cast<const float*>(f.find_tensor("token_embd.weight")->data);
  const auto* norm = reinterpret_cast<const float*>(f.find_tensor("blk.0.attn_norm.weight")->data);
  const int64_t d = t.spec.d_model;
  MatD xtx = MatD::Zero(d, d);
  for (int i = 0; i < 96; ++i) {
    const float* e = embd + tokens[static_cast<size_t>(i)] * d;
    double ms = 0.0;
    for (int64_t c = 0; c < d; ++c) ms += static_cast<double>(e[c]) * e[c];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(d) + t.spec.rms_norm_eps);
    Eigen::VectorXd x(d);
    for (int64_t c = 0; c < d; ++c) x(c) = e[c] * inv * norm[c];
    xtx += x * x.transpose();
  }
  const lio::InputStats& a = s.at(0, lio::LinearInput::Attn);
  const Eigen::Map<const MatD> got(a.xtx.data(), d, d);
  EXPECT_LT((got - xtx).cwiseAbs().maxCoeff(), 1e-3 * xtx.cwiseAbs().maxCoeff());
  EXPECT_THROW(lio::collect_calibration(m, std::vector<int32_t>(10, 5), -1, 32, -1), lio::InvalidArgument);
}

/// Max |logit difference| of `path` against the tiny model over a fixed prompt.
double max_logit_diff(const std::string& ref, const std::string& path) {
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 100, 7, 260, 3, 99, 120, 5, 64};
  std::vector<std::vector<float>> out;
  for (const std::string& p : {ref, path}) {
    const lio::LoadedModel m = lio::load_model(p, lio::WeightMode::AsStored);
    auto runner = lio::make_runner(m, lio::Device::Cpu, lio::KvPoolOptions{16, 8});
    lio::SoloSequence seq(*runner, 64);
    const std::span<const float> l = seq.forward(prompt, /*all_logits=*/true);
    out.emplace_back(l.begin(), l.end());
  }
  double mx = 0.0;
  for (size_t i = 0; i < out[0].size(); ++i) mx = std::max(mx, static_cast<double>(std::fabs(out[0][i] - out[1][i])));
  return mx;
}

TEST(QuantizeCalibrated, GptqAndAwqOnTheTinyModelBeatRtnAndTheFilesRun) {
  const TinySetup t = tiny_setup("lio_quant_calibrated");
  if (!std::filesystem::exists(t.text)) GTEST_SKIP() << t.text << " missing";
  // GPTQ into llama.cpp's Q4_0 blocks (--llama-blocks), AWQ into LIO's packed Q3_0.
  for (const std::string method : {"gptq", "awq"}) {
    lio::QuantizeOptions o;
    o.method = method;
    o.bits = 3;
    o.group_size = 64;
    o.llama_blocks = method == "gptq";
    o.calib_path = t.text;
    o.calib_ctx = 64;
    o.calib_chunks = 4;
    int64_t calib_calls = 0;
    const std::string out = t.dir + "/" + method + ".gguf";
    const lio::QuantizeReport r = lio::quantize_gguf(t.model, out, o, {}, [&](int64_t, int64_t) { ++calib_calls; });
    EXPECT_EQ(calib_calls, 4) << method;
    EXPECT_EQ(r.calib_tokens, 256) << method;
    EXPECT_GT(r.output_error_rtn, 0.0) << method;
    EXPECT_LT(r.output_error, r.output_error_rtn) << method;
    const lio::GgufFile f = lio::GgufFile::open(out);
    for (const lio::GgufTensorInfo& ti : f.tensors()) {
      if (ti.shape.size() != 2) continue;
      if (!o.llama_blocks) {
        ASSERT_EQ(ti.dtype, DType::Q3_0) << method << " " << ti.name;
        EXPECT_EQ(ti.size_bytes, ti.n_elems() / 32 * 14) << ti.name;  // 3.5 bits per weight
        continue;
      }
      ASSERT_EQ(ti.dtype, DType::Q4_0) << method << " " << ti.name;
      // 3-bit codes: nibbles 4 .. 11 only (code + 8 with codes in [-4, 3]).
      const auto* blocks = reinterpret_cast<const lio::BlockQ4_0*>(ti.data);
      for (int64_t b = 0; b < ti.n_elems() / 32; ++b)
        for (uint8_t byte : blocks[b].qs) {
          ASSERT_GE(byte & 15, 4);
          ASSERT_LE(byte & 15, 11);
          ASSERT_GE(byte >> 4, 4);
          ASSERT_LE(byte >> 4, 11);
        }
    }
    EXPECT_LT(max_logit_diff(t.model, out), 50.0) << method;  // runs, finite
  }
}

TEST(QuantizeCalibrated, AwqFoldsItsScalesWithoutChangingTheModel) {
  // At 8 bits rounding is nearly lossless, so AWQ's file must be as close to the original as
  // RTN's: a scale folded into a norm or W_up the wrong way round would change the function.
  const TinySetup t = tiny_setup("lio_quant_awq_fold");
  if (!std::filesystem::exists(t.text)) GTEST_SKIP() << t.text << " missing";
  lio::QuantizeOptions o;
  o.bits = 8;
  lio::quantize_gguf(t.model, t.dir + "/rtn8.gguf", o);
  o.method = "awq";
  o.calib_path = t.text;
  o.calib_ctx = 64;
  o.calib_chunks = 2;
  lio::quantize_gguf(t.model, t.dir + "/awq8.gguf", o);
  const lio::GgufFile f = lio::GgufFile::open(t.dir + "/awq8.gguf");
  const lio::GgufFile in = lio::GgufFile::open(t.model);
  // The norms did change (the scales are not all 1)...
  const auto* n0 = reinterpret_cast<const float*>(in.find_tensor("blk.0.ffn_norm.weight")->data);
  const auto* n1 = reinterpret_cast<const float*>(f.find_tensor("blk.0.ffn_norm.weight")->data);
  double moved = 0.0;
  for (int64_t c = 0; c < t.spec.d_model; ++c) moved = std::max(moved, static_cast<double>(std::fabs(n0[c] - n1[c])));
  EXPECT_GT(moved, 1e-4);
  // ...and the model did not.
  const double rtn = max_logit_diff(t.model, t.dir + "/rtn8.gguf");
  const double awq = max_logit_diff(t.model, t.dir + "/awq8.gguf");
  EXPECT_LT(awq, 3.0 * rtn + 1e-3) << "AWQ 8-bit " << awq << ", RTN 8-bit " << rtn;
}

TEST(QuantizeCalibrated, SmoothQuantFoldsEquationFourScales) {
  // SmoothQuant at 8 bits per channel: the norms become norm / s with s_c = max|X_c|^alpha /
  // max|W_c|^(1 - alpha) (Xiao et al. 2023, eq. 4), and the function barely changes.
  const TinySetup t = tiny_setup("lio_quant_smooth");
  if (!std::filesystem::exists(t.text)) GTEST_SKIP() << t.text << " missing";
  lio::QuantizeOptions o;
  o.bits = 8;
  o.group_size = lio::kPerChannel;
  lio::quantize_gguf(t.model, t.dir + "/rtn8.gguf", o);
  o.method = "smoothquant";
  o.smooth_alpha = 0.7;
  o.calib_path = t.text;
  o.calib_ctx = 64;
  o.calib_chunks = 2;
  const lio::QuantizeReport r = lio::quantize_gguf(t.model, t.dir + "/sq8.gguf", o);
  EXPECT_EQ(r.calib_tokens, 128);

  // The statistics quantize_gguf saw: the same text, tokens and chunks.
  const lio::LoadedModel m = lio::load_model(t.model, lio::WeightMode::AsStored);
  std::ifstream f(t.text, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const bool bos = m.tokenizer->add_bos_default();
  const lio::CalibrationStats st =
      lio::collect_calibration(m, m.tokenizer->encode(text, false, bos), bos ? m.tokenizer->bos_id() : -1, 64, 2);
  const lio::InputStats& ffn = st.at(1, lio::LinearInput::Ffn);
  const lio::GgufFile in = lio::GgufFile::open(t.model), out = lio::GgufFile::open(t.dir + "/sq8.gguf");
  const int64_t d = t.spec.d_model, d_ff = t.spec.d_ff;
  const auto* gate = reinterpret_cast<const float*>(in.find_tensor("blk.1.ffn_gate.weight")->data);
  const auto* up = reinterpret_cast<const float*>(in.find_tensor("blk.1.ffn_up.weight")->data);
  const auto* n0 = reinterpret_cast<const float*>(in.find_tensor("blk.1.ffn_norm.weight")->data);
  const auto* n1 = reinterpret_cast<const float*>(out.find_tensor("blk.1.ffn_norm.weight")->data);
  for (int64_t c = 0; c < d; ++c) {
    float wmax = 0.0f;
    for (int64_t r = 0; r < d_ff; ++r) wmax = std::max({wmax, std::fabs(gate[r * d + c]), std::fabs(up[r * d + c])});
    const double s = std::pow(ffn.abs_max[static_cast<size_t>(c)], 0.7) / std::pow(wmax, 0.3);
    EXPECT_NEAR(n1[c], n0[c] / s, 1e-5 * std::fabs(n0[c] / s)) << "channel " << c;
  }
  const double rtn = max_logit_diff(t.model, t.dir + "/rtn8.gguf");
  const double sq = max_logit_diff(t.model, t.dir + "/sq8.gguf");
  EXPECT_LT(sq, 3.0 * rtn + 1e-3) << "SmoothQuant 8-bit " << sq << ", RTN 8-bit " << rtn;
}

TEST(QuantizeCalibrated, MissingOrShortCalibrationTextIsAClearError) {
  const TinySetup t = tiny_setup("lio_quant_calib_bad");
  lio::QuantizeOptions o;
  o.method = "gptq";
  o.calib_path = t.dir + "/nope.txt";
  EXPECT_THROW(lio::quantize_gguf(t.model, t.dir + "/x.gguf", o), lio::InvalidArgument);
  {
    std::FILE* f = std::fopen((t.dir + "/short.txt").c_str(), "w");
    std::fputs("Too short.", f);
    std::fclose(f);
  }
  o.calib_path = t.dir + "/short.txt";
  EXPECT_THROW(lio::quantize_gguf(t.model, t.dir + "/x.gguf", o), lio::InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(t.dir + "/x.gguf"));
}

}  // namespace
