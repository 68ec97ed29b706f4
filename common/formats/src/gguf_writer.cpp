// gguf_writer.cpp — GgufWriter: builds a GGUF v3 file in memory (metadata in first-set order,
// tensors padded to the alignment as ggml's writer pads them) and writes it.
//
// Source: GGUF specification (ggml repository, docs/gguf.md).
#include "lio/gguf_writer.h"

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "gguf_format.h"
#include "lio/atomic_file.h"
#include "lio/error.h"

namespace lio {

using namespace gguf_detail;  // the layout constants and helpers of gguf_format.h

namespace {

[[noreturn]] void throw_writer(const std::string& what, const std::string& msg) {
  throw InvalidArgument("GgufWriter: " + what + ": " + msg);
}

// Checks that `v` can be written as its declared type: the variant holds the matching
// alternative, integers fit their width, and array items all have the element type.
void validate_value(const GgufValue& v, const std::string& what, int depth) {
  const std::string type(gguf_type_name(v.type));
  auto fits_unsigned = [&](uint64_t max) {
    if (!std::holds_alternative<uint64_t>(v.data))
      throw_writer(what, type + " value must hold uint64_t");
    if (std::get<uint64_t>(v.data) > max) {
      throw_writer(what, std::to_string(std::get<uint64_t>(v.data)) + " does not fit in " + type);
    }
  };
  auto fits_signed = [&](int64_t min, int64_t max) {
    if (!std::holds_alternative<int64_t>(v.data))
      throw_writer(what, type + " value must hold int64_t");
    const int64_t i = std::get<int64_t>(v.data);
    if (i < min || i > max) throw_writer(what, std::to_string(i) + " does not fit in " + type);
  };
  switch (v.type) {
    case GgufType::U8: fits_unsigned(UINT8_MAX); return;
    case GgufType::U16: fits_unsigned(UINT16_MAX); return;
    case GgufType::U32: fits_unsigned(UINT32_MAX); return;
    case GgufType::U64: fits_unsigned(UINT64_MAX); return;
    case GgufType::I8: fits_signed(INT8_MIN, INT8_MAX); return;
    case GgufType::I16: fits_signed(INT16_MIN, INT16_MAX); return;
    case GgufType::I32: fits_signed(INT32_MIN, INT32_MAX); return;
    case GgufType::I64: fits_signed(INT64_MIN, INT64_MAX); return;
    case GgufType::F32:
    case GgufType::F64:
      if (!std::holds_alternative<double>(v.data))
        throw_writer(what, type + " value must hold double");
      return;
    case GgufType::Bool:
      if (!std::holds_alternative<bool>(v.data)) throw_writer(what, "bool value must hold bool");
      return;
    case GgufType::String:
      if (!std::holds_alternative<std::string>(v.data)) {
        throw_writer(what, "string value must hold std::string");
      }
      return;
    case GgufType::Array: {
      if (!std::holds_alternative<std::shared_ptr<GgufArray>>(v.data) ||
          !std::get<std::shared_ptr<GgufArray>>(v.data)) {
        throw_writer(what, "array value must hold a non-null GgufArray");
      }
      if (depth >= kMaxArrayDepth) {  // the reader's limit: arrays at depths 0..7
        throw_writer(what, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      }
      const GgufArray& array = *std::get<std::shared_ptr<GgufArray>>(v.data);
      if (!is_valid_type(static_cast<uint32_t>(array.elem_type))) {
        throw_writer(what, "invalid array element type");
      }
      for (size_t i = 0; i < array.items.size(); ++i) {
        if (array.items[i].type != array.elem_type) {
          throw_writer(what, "array item " + std::to_string(i) + " has type " +
                                 std::string(gguf_type_name(array.items[i].type)) +
                                 ", array element type is " +
                                 std::string(gguf_type_name(array.elem_type)));
        }
        validate_value(array.items[i], what, depth + 1);
      }
      return;
    }
  }
  throw_writer(what, "invalid value type " + std::to_string(static_cast<uint32_t>(v.type)));
}

class ByteSink {
 public:
  explicit ByteSink(std::vector<std::byte>& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }
  void put_bytes(const std::vector<std::byte>& b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void pad_to(uint64_t alignment) { out_.resize(align_up(out_.size(), alignment), std::byte{0}); }

  void put_value(const GgufValue& v) {
    switch (v.type) {
      case GgufType::U8: put(static_cast<uint8_t>(std::get<uint64_t>(v.data))); return;
      case GgufType::U16: put(static_cast<uint16_t>(std::get<uint64_t>(v.data))); return;
      case GgufType::U32: put(static_cast<uint32_t>(std::get<uint64_t>(v.data))); return;
      case GgufType::U64: put(std::get<uint64_t>(v.data)); return;
      case GgufType::I8: put(static_cast<int8_t>(std::get<int64_t>(v.data))); return;
      case GgufType::I16: put(static_cast<int16_t>(std::get<int64_t>(v.data))); return;
      case GgufType::I32: put(static_cast<int32_t>(std::get<int64_t>(v.data))); return;
      case GgufType::I64: put(std::get<int64_t>(v.data)); return;
      case GgufType::F32: put(static_cast<float>(std::get<double>(v.data))); return;
      case GgufType::F64: put(std::get<double>(v.data)); return;
      case GgufType::Bool: put(static_cast<uint8_t>(std::get<bool>(v.data) ? 1 : 0)); return;
      case GgufType::String: put_string(std::get<std::string>(v.data)); return;
      case GgufType::Array: {
        const GgufArray& array = *std::get<std::shared_ptr<GgufArray>>(v.data);
        put(static_cast<uint32_t>(array.elem_type));
        put<uint64_t>(array.items.size());
        for (const GgufValue& item : array.items) put_value(item);
        return;
      }
    }
  }

 private:
  std::vector<std::byte>& out_;
};

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  validate_value(value, "key " + single_quoted(key), 0);
  if (key == "general.alignment") {
    if (value.type != GgufType::U32) throw_writer("key 'general.alignment'", "must be u32");
    const uint64_t a = std::get<uint64_t>(value.data);
    if (a == 0 || !std::has_single_bit(a) || a > (1u << 30)) {
      throw_writer("key 'general.alignment'",
                   "is " + std::to_string(a) + ", expected a power of two between 1 and 2^30");
    }
  }
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::span<const std::byte> data) {
  const std::string what = "tensor " + single_quoted(name);
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) throw_writer(what, "duplicate tensor name");
  }
  if (shape.empty() || shape.size() > kMaxDims) {
    throw_writer(
        what, "rank " + std::to_string(shape.size()) + ", expected 1.." + std::to_string(kMaxDims));
  }
  int64_t n_elems = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(n_elems, dim, &n_elems)) {
      throw_writer(what, "invalid or overflowing shape dimension " + std::to_string(dim));
    }
  }
  const DTypeInfo info = dtype_info(dtype);
  if (shape.back() % info.block_elems != 0) {
    throw_writer(what, "innermost dimension " + std::to_string(shape.back()) +
                           " is not a multiple of the " + std::string(info.name) + " block size " +
                           std::to_string(info.block_elems));
  }
  const int64_t expected_bytes = dtype_row_bytes(dtype, n_elems);
  if (static_cast<int64_t>(data.size()) != expected_bytes) {
    throw_writer(what, "data has " + std::to_string(data.size()) + " bytes, expected " +
                           std::to_string(expected_bytes) + " for " + std::to_string(n_elems) +
                           " elements of " + std::string(info.name));
  }
  tensors_.push_back({name, dtype, std::move(shape), {data.begin(), data.end()}});
}

void GgufWriter::add_tensor_f32(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                std::span<const float> values) {
  int64_t n_elems = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(n_elems, dim, &n_elems)) {
      throw_writer("tensor " + single_quoted(name),
                   "invalid shape dimension " + std::to_string(dim));
    }
  }
  if (static_cast<int64_t>(values.size()) != n_elems) {
    throw_writer("tensor " + single_quoted(name), std::to_string(values.size()) +
                                                      " values given for a shape of " +
                                                      std::to_string(n_elems) + " elements");
  }
  if (shape.empty() || n_elems == 0) {
    add_tensor(name, dtype, std::move(shape), {});  // reports rank / block errors
    return;
  }
  const int64_t row_elems = shape.back();
  if (row_elems % dtype_info(dtype).block_elems != 0) {
    add_tensor(name, dtype, std::move(shape), {});  // reports the block-size error
    return;
  }
  const int64_t row_bytes = dtype_row_bytes(dtype, row_elems);
  std::vector<std::byte> bytes(static_cast<size_t>(dtype_row_bytes(dtype, n_elems)));
  for (int64_t r = 0; r < n_elems / row_elems; ++r) {
    quantize_row(dtype, values.data() + r * row_elems, bytes.data() + r * row_bytes, row_elems);
  }
  add_tensor(name, dtype, std::move(shape), bytes);
}

std::vector<std::byte> GgufWriter::serialize() const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [k, v] : kv_) {
    if (k == "general.alignment") alignment = std::get<uint64_t>(v.data);
  }
  std::vector<std::byte> out;
  ByteSink sink(out);
  sink.put(kGgufMagic);
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    sink.put_string(key);
    sink.put(static_cast<uint32_t>(value.type));
    sink.put_value(value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) sink.put<uint64_t>(*it);
    sink.put(static_cast<uint32_t>(t.dtype));
    sink.put<uint64_t>(offset);
    offset = align_up(offset + t.data.size(), alignment);
  }
  // Like ggml's writer, every tensor (the last one included) is padded to the alignment.
  sink.pad_to(alignment);
  for (const PendingTensor& t : tensors_) {
    sink.put_bytes(t.data);
    sink.pad_to(alignment);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<std::byte> bytes = serialize();
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace lio
