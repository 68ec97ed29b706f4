// quantize.cpp — `lio quantize`: RTN, GPTQ, AWQ and SmoothQuant into llama.cpp's block types
// (see lio/quantize.h).
#include "lio/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "lio/calibrated_quant.h"
#include "lio/error.h"
#include "lio/gguf.h"
#include "lio/gguf_writer.h"
#include "lio/model_loader.h"
#include "lio/quantization.h"

namespace lio {

namespace {

/// llama.cpp's `enum llama_ftype` (include/llama.h): what general.file_type says.
uint32_t llama_ftype(DType t) {
  switch (t) {
    case DType::F32: return 0;   // LLAMA_FTYPE_ALL_F32
    case DType::F16: return 1;   // LLAMA_FTYPE_MOSTLY_F16
    case DType::Q4_0: return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case DType::Q4_1: return 3;  // LLAMA_FTYPE_MOSTLY_Q4_1
    case DType::Q8_0: return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case DType::BF16: return 32; // LLAMA_FTYPE_MOSTLY_BF16
    case DType::Q3_0:            // LIO's own blocks: llama.cpp has no ftype for them
    case DType::Q3_1: return 1024;  // LLAMA_FTYPE_GUESSED ("not specified in the model file")
    default: break;
  }
  throw InvalidArgument("quantize: no llama ftype for " + std::string(dtype_info(t).name));
}

/// One row of n floats into `t`: Q8_0 / Q4_0 / Q4_1 block by block through chapter 03's
/// quantize_block_* (the learner's code when the chapter is switched to exercises), anything
/// else through quantize_row. Throws InvalidArgument for a non-finite weight (naming its block).
void rtn_quantize_row(DType t, const float* x, std::byte* out, int64_t n) {
  if (t != DType::Q8_0 && t != DType::Q4_0 && t != DType::Q4_1) {
    quantize_row(t, x, out, n);
    return;
  }
  for (int64_t b = 0; b < n / kQuantBlockElems; ++b) {
    const std::span<const float, kQuantBlockElems> block(x + b * kQuantBlockElems, kQuantBlockElems);
    for (float v : block) {
      if (!std::isfinite(v)) throw InvalidArgument("quantize: non-finite weight in block " + std::to_string(b));
    }
    if (t == DType::Q8_0) {
      const BlockQ8_0 q = quantize_block_q8_0(block);
      std::memcpy(out + b * static_cast<int64_t>(sizeof q), &q, sizeof q);
    } else if (t == DType::Q4_0) {
      const BlockQ4_0 q = quantize_block_q4_0(block);
      std::memcpy(out + b * static_cast<int64_t>(sizeof q), &q, sizeof q);
    } else {
      const BlockQ4_1 q = quantize_block_q4_1(block);
      std::memcpy(out + b * static_cast<int64_t>(sizeof q), &q, sizeof q);
    }
  }
}

/// The decoder block a tensor belongs to ("blk.12.attn_q.weight" -> 12), or -1.
int64_t block_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const size_t dot = name.find('.', 4);
  try {
    return std::stoll(name.substr(4, dot - 4));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::vector<std::pair<DType, std::string>> parse_keep(const std::string& text) {
  std::vector<std::pair<DType, std::string>> out;
  std::stringstream groups(text);
  for (std::string group; std::getline(groups, group, ';');) {
    if (group.empty()) continue;
    const size_t colon = group.find(':');
    if (colon == std::string::npos) {
      throw InvalidArgument("--keep '" + group + "': want DTYPE:PREFIX[,PREFIX...], e.g. f32:token_embd,output");
    }
    const std::string dt = group.substr(0, colon);
    DType dtype;
    if (dt == "f32") {
      dtype = DType::F32;
    } else if (dt == "f16") {
      dtype = DType::F16;
    } else if (dt == "bf16") {
      dtype = DType::BF16;
    } else if (dt == "q8_0") {
      dtype = DType::Q8_0;
    } else {
      throw InvalidArgument("--keep: dtype must be f32, f16, bf16 or q8_0, got '" + dt + "'");
    }
    std::stringstream names(group.substr(colon + 1));
    bool any = false;
    for (std::string prefix; std::getline(names, prefix, ',');) {
      if (prefix.empty()) continue;
      out.emplace_back(dtype, prefix);
      any = true;
    }
    if (!any) throw InvalidArgument("--keep '" + group + "' names no tensor");
  }
  return out;
}

QuantGrid quantize_grid(const QuantizeOptions& o) {
  const QuantGrid g{o.bits, o.group_size, o.asymmetric, o.llama_blocks};
  check_grid(g);
  return g;
}

DType quantize_target(const QuantizeOptions& o) {
  if (o.method != "rtn" && o.method != "gptq" && o.method != "awq" && o.method != "smoothquant") {
    throw InvalidArgument("--method " + o.method + ": want rtn, gptq, awq or smoothquant");
  }
  const DType t = grid_container(quantize_grid(o));
  if (o.method != "rtn") {
    if (o.calib_path.empty()) {
      throw InvalidArgument("--method " + o.method + " needs --calib FILE: a text to run the model on");
    }
    if (o.calib_ctx < 2) throw InvalidArgument("--calib-ctx must be >= 2, got " + std::to_string(o.calib_ctx));
    if (o.calib_chunks == 0) throw InvalidArgument("--calib-chunks must be > 0 (or -1 for all)");
    if (!(o.damp >= 0.0 && o.damp < 1.0)) throw InvalidArgument("--damp must be in [0, 1), got " + std::to_string(o.damp));
    if (o.awq_grid < 1) throw InvalidArgument("--awq-grid must be >= 1, got " + std::to_string(o.awq_grid));
    if (!(o.smooth_alpha >= 0.0 && o.smooth_alpha <= 1.0)) {
      throw InvalidArgument("--smooth-alpha must be in [0, 1], got " + std::to_string(o.smooth_alpha));
    }
  }
  return t;
}

namespace {

/// A dense f32 copy of tensor t (rows, cols).
std::vector<float> dense(const GgufTensorInfo& t, int64_t rows, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const int64_t in_row = dtype_row_bytes(t.dtype, cols);
  for (int64_t i = 0; i < rows; ++i) dequantize_row(t.dtype, t.data + i * in_row, w.data() + i * cols, cols);
  return w;
}

/// The part of a block tensor's name after "blk.N." ("attn_q.weight"), or "".
std::string suffix_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? "" : name.substr(dot + 1);
}

/// The calibrated input a block matrix reads, or -1 (a matrix GPTQ leaves to RTN).
int input_of(const std::string& suffix) {
  if (suffix == "attn_q.weight" || suffix == "attn_k.weight" || suffix == "attn_v.weight" ||
      suffix == "attn_kv_a_mqa.weight")
    return static_cast<int>(LinearInput::Attn);
  if (suffix == "attn_output.weight") return static_cast<int>(LinearInput::AttnOut);
  if (suffix == "ffn_gate.weight" || suffix == "ffn_up.weight") return static_cast<int>(LinearInput::Ffn);
  if (suffix == "ffn_down.weight") return static_cast<int>(LinearInput::FfnDown);
  return -1;
}

/// One decoder block's AWQ or SmoothQuant scales (empty: that input is not scaled).
struct AwqLayerScales {
  std::vector<float> attn, ffn, down;  ///< (d_model), (d_model), (d_ff)
};

/// The scales of the three inputs a block's scales fold into (prefix p = "blk.N."): q/k/v
/// behind attn_norm, gate/up behind ffn_norm, down behind W_up's rows (dropped without W_up).
/// scales_of(matrix names, input, norm name or nullptr) gives one input's (empty: not scaled).
template <class ScalesOf>
AwqLayerScales block_inputs(const GgufFile& in, const std::string& p, const ScalesOf& scales_of) {
  AwqLayerScales s;
  s.attn = scales_of(std::vector<std::string>{"attn_q.weight", "attn_k.weight", "attn_v.weight"}, LinearInput::Attn,
                     "attn_norm.weight");
  s.ffn = scales_of(std::vector<std::string>{"ffn_gate.weight", "ffn_up.weight"}, LinearInput::Ffn, "ffn_norm.weight");
  s.down = scales_of(std::vector<std::string>{"ffn_down.weight"}, LinearInput::FfnDown, nullptr);
  if (!s.down.empty() && in.find_tensor(p + "ffn_up.weight") == nullptr) s.down.clear();
  return s;
}

/// AWQ's scales for block `l` of `in`: q/k/v on the attention input, gate/up on the MLP input,
/// down on its input (folded into W_up's rows). Adds RTN's and AWQ's output errors to `r`.
AwqLayerScales awq_layer(const GgufFile& in, int64_t l, const QuantGrid& g, const CalibrationStats& stats,
                         int n_grid, QuantizeReport& r) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const auto matrix = [&](const std::string& s, std::vector<float>& w, AwqMatrix& m) {
    const GgufTensorInfo* t = in.find_tensor(p + s);
    if (t == nullptr || t->shape.size() != 2) return false;
    m.rows = t->shape[0];
    w = dense(*t, t->shape[0], t->shape[1]);
    m.w = w.data();
    return true;
  };
  const auto search = [&](std::vector<std::string> names, LinearInput input, const char* norm) {
    const InputStats& st = stats.at(l, input);
    std::vector<std::vector<float>> ws(names.size());
    std::vector<AwqMatrix> mats(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      if (!matrix(names[i], ws[i], mats[i])) return std::vector<float>{};
      if (static_cast<int64_t>(ws[i].size()) != mats[i].rows * st.dim) return std::vector<float>{};
    }
    if (norm != nullptr && in.find_tensor(p + norm) == nullptr) return std::vector<float>{};
    const AwqSearch best = awq_scales(g, mats, st, n_grid);
    // RTN's error is the search's alpha = 0 point; recompute it here for the report.
    for (const AwqMatrix& m : mats) {
      const std::vector<float> q = rtn_quantize(g, m.w, m.rows, st.dim).dequantized();
      r.output_error_rtn += output_error(m.w, q.data(), m.rows, st.dim, st.xtx);
    }
    r.output_error += best.loss;
    return best.scales;
  };
  return block_inputs(in, p, search);
}

/// SmoothQuant's scales for block `l` (Xiao et al. 2023, eq. 4): per input channel c,
/// s_c = max|X_c|^alpha / max|W_c|^(1 - alpha), with max|X_c| over the calibration tokens and
/// max|W_c| over column c of every matrix reading that input; a channel with either range 0
/// keeps s_c = 1. Same inputs and folding as awq_layer.
AwqLayerScales smooth_layer(const GgufFile& in, int64_t l, const CalibrationStats& stats, double alpha) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const auto scales = [&](std::vector<std::string> names, LinearInput input, const char* norm) {
    const InputStats& st = stats.at(l, input);
    std::vector<float> wmax(static_cast<size_t>(st.dim), 0.0f);
    for (const std::string& name : names) {
      const GgufTensorInfo* t = in.find_tensor(p + name);
      if (t == nullptr || t->shape.size() != 2 || t->shape[1] != st.dim) return std::vector<float>{};
      const std::vector<float> w = dense(*t, t->shape[0], t->shape[1]);
      for (int64_t r = 0; r < t->shape[0]; ++r)
        for (int64_t c = 0; c < st.dim; ++c)
          wmax[static_cast<size_t>(c)] = std::max(wmax[static_cast<size_t>(c)], std::fabs(w[static_cast<size_t>(r * st.dim + c)]));
    }
    if (norm != nullptr && in.find_tensor(p + norm) == nullptr) return std::vector<float>{};
    std::vector<float> s(static_cast<size_t>(st.dim), 1.0f);
    for (size_t c = 0; c < s.size(); ++c) {
      const double x = st.abs_max[c], w = wmax[c];
      if (x > 0.0 && w > 0.0) s[c] = static_cast<float>(std::pow(x, alpha) / std::pow(w, 1.0 - alpha));
    }
    return s;
  };
  return block_inputs(in, p, scales);
}

}  // namespace

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o,
                             const std::function<void(int64_t, int64_t)>& on_layer,
                             const std::function<void(int64_t, int64_t)>& on_calib) {
  const DType target = quantize_target(o);
  const QuantGrid grid = quantize_grid(o);
  // RTN at llama.cpp's own grids goes block by block through Tasks 2-3 (ggml's exact rules).
  const bool native_rtn = grid.group_size == kQuantBlockElems && grid.bits != 3;
  std::error_code ec;
  if (std::filesystem::exists(out_path) && std::filesystem::equivalent(in_path, out_path, ec)) {
    throw InvalidArgument("quantize: --out is the input file; write to a new path");
  }
  const GgufFile in = GgufFile::open(in_path);
  QuantizeReport r;

  CalibrationStats stats;
  if (o.method != "rtn") {
    std::ifstream f(o.calib_path, std::ios::binary);
    if (!f) throw InvalidArgument("quantize: cannot read --calib " + o.calib_path);
    std::stringstream text;
    text << f.rdbuf();
    const LoadedModel m = load_model(in_path, WeightMode::AsStored);
    const bool add_bos = m.tokenizer->add_bos_default();
    const std::vector<int32_t> tokens = m.tokenizer->encode(text.str(), /*parse_special=*/false, add_bos);
    stats = collect_calibration(m, tokens, add_bos ? m.tokenizer->bos_id() : -1, o.calib_ctx, o.calib_chunks, on_calib);
    r.calib_tokens = stats.n_tokens;
  }

  GgufWriter w;
  for (const auto& [key, value] : in.metadata()) {
    if (key == "general.file_type") continue;
    w.set(key, value);
  }
  w.set("general.file_type", GgufValue::u32(llama_ftype(target)));
  std::string by = "lio quantize --method " + o.method + " (" + grid.name() + ")";
  w.set("general.quantized_by", GgufValue::str(by));

  std::set<int64_t> blocks;
  for (const GgufTensorInfo& t : in.tensors())
    if (block_of(t.name) >= 0) blocks.insert(block_of(t.name));
  const auto n_blocks = static_cast<int64_t>(blocks.size());
  int64_t last_block = -1, done = 0;
  std::map<int64_t, AwqLayerScales> awq;  // by decoder block, found when first reached

  std::vector<float> row;
  std::vector<std::byte> out;
  for (const GgufTensorInfo& t : in.tensors()) {
    const int64_t block = block_of(t.name);
    if (block != last_block && block >= 0 && last_block >= 0 && on_layer) on_layer(std::min(++done, n_blocks), n_blocks);
    last_block = block >= 0 ? block : last_block;
    r.bytes_in += t.size_bytes;
    const std::string suffix = suffix_of(t.name);
    const AwqLayerScales* scales = nullptr;
    if ((o.method == "awq" || o.method == "smoothquant") && block >= 0 &&
        block < static_cast<int64_t>(stats.layers.size())) {
      if (!awq.contains(block)) {
        awq[block] = o.method == "awq" ? awq_layer(in, block, grid, stats, o.awq_grid, r)
                                       : smooth_layer(in, block, stats, o.smooth_alpha);
      }
      scales = &awq[block];
    }
    // AWQ and SmoothQuant fold diag(s)^-1 into the norms that feed the scaled inputs.
    if (scales != nullptr && t.shape.size() == 1 &&
        ((suffix == "attn_norm.weight" && !scales->attn.empty()) || (suffix == "ffn_norm.weight" && !scales->ffn.empty()))) {
      const std::vector<float>& s = suffix == "attn_norm.weight" ? scales->attn : scales->ffn;
      std::vector<float> v = dense(t, 1, t.shape[0]);
      if (v.size() != s.size()) throw InvalidArgument("quantize: " + t.name + " does not match its AWQ scales");
      for (size_t i = 0; i < v.size(); ++i) v[i] /= s[i];
      w.add_tensor(t.name, DType::F32, t.shape, std::as_bytes(std::span<const float>(v)));
      r.bytes_out += static_cast<int64_t>(v.size() * sizeof(float));
      ++r.n_tensors;
      continue;
    }
    const bool matrix = t.shape.size() == 2 && t.name.ends_with(".weight");
    DType want = t.dtype;
    if (matrix) {
      want = target;
      for (const auto& [dtype, prefix] : o.keep)
        if (t.name.rfind(prefix, 0) == 0) want = dtype;
    }
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    if (want != t.dtype && cols % dtype_info(want).block_elems != 0) want = t.dtype;  // odd shape: as is
    if (want == t.dtype) {
      w.add_tensor(t.name, t.dtype, t.shape, std::span<const std::byte>(t.data, static_cast<size_t>(t.size_bytes)));
      r.bytes_out += t.size_bytes;
      ++r.n_tensors;
      continue;
    }
    const int64_t rows = t.n_elems() / cols;
    const int64_t out_row = dtype_row_bytes(want, cols);
    out.resize(static_cast<size_t>(rows * out_row));
    if (want != target || (o.method == "rtn" && native_rtn)) {
      // --keep types, and RTN at llama.cpp's grids: row by row (Tasks 2-3 for the Q types).
      const int64_t in_row = dtype_row_bytes(t.dtype, cols);
      row.resize(static_cast<size_t>(cols));
      for (int64_t i = 0; i < rows; ++i) {
        dequantize_row(t.dtype, t.data + i * in_row, row.data(), cols);
        try {
          rtn_quantize_row(want, row.data(), out.data() + i * out_row, cols);
        } catch (const InvalidArgument& e) {
          throw InvalidArgument(t.name + " row " + std::to_string(i) + ": " + e.what());
        }
      }
    } else {
      std::vector<float> wd = dense(t, rows, cols);
      const int in_kind = input_of(suffix);
      std::optional<QuantizedMatrix> q;
      try {
        if (scales != nullptr) {  // AWQ, SmoothQuant: W diag(s) (W_up also diag(s_down)^-1 W), then RTN
          const std::vector<float>* col_s = nullptr;
          if (suffix == "attn_q.weight" || suffix == "attn_k.weight" || suffix == "attn_v.weight") col_s = &scales->attn;
          if (suffix == "ffn_gate.weight" || suffix == "ffn_up.weight") col_s = &scales->ffn;
          if (suffix == "ffn_down.weight") col_s = &scales->down;
          if (col_s != nullptr && static_cast<int64_t>(col_s->size()) == cols)
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t c = 0; c < cols; ++c) wd[static_cast<size_t>(i * cols + c)] *= (*col_s)[static_cast<size_t>(c)];
          if (suffix == "ffn_up.weight" && static_cast<int64_t>(scales->down.size()) == rows)
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t c = 0; c < cols; ++c) wd[static_cast<size_t>(i * cols + c)] /= scales->down[static_cast<size_t>(i)];
        }
        if (o.method == "gptq" && block >= 0 && in_kind >= 0 && block < static_cast<int64_t>(stats.layers.size()) &&
            stats.at(block, static_cast<LinearInput>(in_kind)).dim == cols) {
          const InputStats& st = stats.at(block, static_cast<LinearInput>(in_kind));
          q.emplace(gptq_quantize(grid, wd.data(), rows, cols, st, GptqOptions{o.damp, o.act_order}));
          const std::vector<float> rtn = rtn_quantize(grid, wd.data(), rows, cols).dequantized();
          r.output_error_rtn += output_error(wd.data(), rtn.data(), rows, cols, st.xtx);
          r.output_error += output_error(wd.data(), q->dequantized().data(), rows, cols, st.xtx);
        } else {
          q.emplace(rtn_quantize(grid, wd.data(), rows, cols));
        }
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(t.name + ": " + e.what());
      }
      for (int64_t i = 0; i < rows; ++i) q->encode_row(i, out.data() + i * out_row);
    }
    w.add_tensor(t.name, want, t.shape, out);
    r.bytes_out += static_cast<int64_t>(out.size());
    ++r.n_tensors;
    if (want == target) {
      ++r.n_quantized;
      r.params_quantized += t.n_elems();
    }
  }
  if (last_block >= 0 && on_layer) on_layer(n_blocks, n_blocks);
  w.write(out_path);
  return r;
}

}  // namespace lio
