// quantize.cpp — `lio quantize`: RTN into llama.cpp's block types (see lio/quantize.h).
#include "lio/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "lio/error.h"
#include "lio/gguf.h"
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

DType quantize_target(const QuantizeOptions& o) {
  if (o.method != "rtn") {
    throw UnsupportedError("--method " + o.method + ": only rtn is built so far (gptq and awq are chapter 03 work in progress)");
  }
  if (o.group_size != 32) {
    throw UnsupportedError("--group-size " + std::to_string(o.group_size) +
                           ": only 32 so far (llama.cpp's Q8_0, Q4_0 and Q4_1 blocks)");
  }
  if (o.bits == 8) {
    if (o.asymmetric) throw InvalidArgument("--asymmetric: 8-bit RTN writes Q8_0, which is symmetric");
    return DType::Q8_0;
  }
  if (o.bits == 4) return o.asymmetric ? DType::Q4_1 : DType::Q4_0;
  throw UnsupportedError("--bits " + std::to_string(o.bits) + ": only 8 and 4 so far");
}

QuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o,
                             const std::function<void(int64_t, int64_t)>& on_layer) {
  const DType target = quantize_target(o);
  std::error_code ec;
  if (std::filesystem::exists(out_path) && std::filesystem::equivalent(in_path, out_path, ec)) {
    throw InvalidArgument("quantize: --out is the input file; write to a new path");
  }
  const GgufFile in = GgufFile::open(in_path);
  GgufWriter w;
  for (const auto& [key, value] : in.metadata()) {
    if (key == "general.file_type") continue;
    w.set(key, value);
  }
  w.set("general.file_type", GgufValue::u32(llama_ftype(target)));
  w.set("general.quantized_by", GgufValue::str("lio quantize --method " + o.method));

  std::set<int64_t> blocks;
  for (const GgufTensorInfo& t : in.tensors())
    if (block_of(t.name) >= 0) blocks.insert(block_of(t.name));
  const auto n_blocks = static_cast<int64_t>(blocks.size());
  int64_t last_block = -1, done = 0;

  QuantizeReport r;
  std::vector<float> row;
  std::vector<std::byte> out;
  for (const GgufTensorInfo& t : in.tensors()) {
    const int64_t block = block_of(t.name);
    if (block != last_block && block >= 0 && last_block >= 0 && on_layer) on_layer(std::min(++done, n_blocks), n_blocks);
    last_block = block >= 0 ? block : last_block;
    r.bytes_in += t.size_bytes;
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
    const int64_t in_row = dtype_row_bytes(t.dtype, cols), out_row = dtype_row_bytes(want, cols);
    row.resize(static_cast<size_t>(cols));
    out.resize(static_cast<size_t>(rows * out_row));
    for (int64_t i = 0; i < rows; ++i) {
      dequantize_row(t.dtype, t.data + i * in_row, row.data(), cols);
      try {
        rtn_quantize_row(want, row.data(), out.data() + i * out_row, cols);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(t.name + " row " + std::to_string(i) + ": " + e.what());
      }
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
