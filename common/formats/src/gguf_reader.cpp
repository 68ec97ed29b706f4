// gguf_reader.cpp — GgufFile: a validated GGUF v2/v3 reader over an mmap.
//
// Source: GGUF specification (ggml repository, docs/gguf.md) and ggml's gguf.cpp reader,
// whose checks (n_dims <= 4, ne product overflow, block-size multiple, alignment) this
// reader mirrors. Every length or count read from the file is checked against the bytes
// that remain BEFORE anything is allocated, so a corrupt count gives a FormatError rather
// than std::bad_alloc, and every error message starts with the file path.
#include "lio/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "gguf_format.h"
#include "lio/error.h"

namespace lio {

using namespace gguf_detail;  // the layout constants and helpers of gguf_format.h

namespace {

constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // empty key + type + smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_integer(GgufType t) { return is_unsigned(t) || is_signed(t); }
bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

// Bytes one value of `t` takes on disk, or the least it can take (string: its length
// field; array: its element type and count fields).
uint64_t min_encoded_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
    case GgufType::String: return 8;
    case GgufType::Array: return 4 + 8;
  }
  return 1;
}

// ---- reading ------------------------------------------------------------------------------

/// A bounds-checked little-endian reader over the mapped bytes.
class Cursor {
 public:
  Cursor(const std::byte* data, uint64_t size_bytes, const std::string& path)
      : data_(data), size_bytes_(size_bytes), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_bytes_ - pos_; }

  [[noreturn]] void fail(const std::string& msg) const { throw FormatError(path_ + ": " + msg); }

  void need(uint64_t n_bytes, std::string_view what) const {
    if (n_bytes > remaining()) {
      fail("truncated: " + std::string(what) + " needs " + std::to_string(n_bytes) +
           " bytes at offset " + std::to_string(pos_) + ", but only " +
           std::to_string(remaining()) + " remain");
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t n_bytes = read<uint64_t>(what);
    need(n_bytes, what);  // checked before the string is allocated
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n_bytes);
    pos_ += n_bytes;
    return s;
  }

 private:
  const std::byte* data_;
  uint64_t size_bytes_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

GgufValue read_value(Cursor& c, GgufType type, const std::string& what, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.data = uint64_t{c.read<uint8_t>(what)}; break;
    case GgufType::U16: v.data = uint64_t{c.read<uint16_t>(what)}; break;
    case GgufType::U32: v.data = uint64_t{c.read<uint32_t>(what)}; break;
    case GgufType::U64: v.data = c.read<uint64_t>(what); break;
    case GgufType::I8: v.data = int64_t{c.read<int8_t>(what)}; break;
    case GgufType::I16: v.data = int64_t{c.read<int16_t>(what)}; break;
    case GgufType::I32: v.data = int64_t{c.read<int32_t>(what)}; break;
    case GgufType::I64: v.data = c.read<int64_t>(what); break;
    case GgufType::F32: v.data = double{c.read<float>(what)}; break;
    case GgufType::F64: v.data = c.read<double>(what); break;
    case GgufType::Bool: {
      const uint8_t b = c.read<uint8_t>(what);
      if (b > 1) c.fail(what + ": bool value is " + std::to_string(b) + ", expected 0 or 1");
      v.data = b == 1;
      break;
    }
    case GgufType::String: v.data = c.read_string(what); break;
    case GgufType::Array: {
      const uint32_t elem_raw = c.read<uint32_t>(what);
      if (!is_valid_type(elem_raw)) {
        c.fail(what + ": array element type " + std::to_string(elem_raw) +
               " is not a GGUF value type (0..12)");
      }
      const auto elem_type = static_cast<GgufType>(elem_raw);
      if (elem_type == GgufType::Array && depth + 1 >= kMaxArrayDepth) {
        c.fail(what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      }
      const uint64_t count = c.read<uint64_t>(what);
      const uint64_t min_bytes = min_encoded_bytes(elem_type);
      if (count > c.remaining() / min_bytes) {
        c.fail(what + ": array of " + std::to_string(count) + " " +
               std::string(gguf_type_name(elem_type)) + " needs at least " +
               (count > std::numeric_limits<uint64_t>::max() / min_bytes
                    ? std::string("2^64")
                    : std::to_string(count * min_bytes)) +
               " bytes, but only " + std::to_string(c.remaining()) + " remain");
      }
      auto array = std::make_shared<GgufArray>();
      array->elem_type = elem_type;
      array->items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        array->items.push_back(read_value(c, elem_type, what, depth + 1));
      }
      v.data = std::move(array);
      break;
    }
    default: c.fail(what + ": unknown value type " + std::to_string(static_cast<uint32_t>(type)));
  }
  return v;
}

std::string describe_version_error(uint32_t version) {
  if (version == 1) return "GGUF version 1 is not supported (supported: 2, 3)";
  const uint32_t swapped = __builtin_bswap32(version);
  if (swapped == 2 || swapped == 3) {
    return "big-endian GGUF (version " + std::to_string(swapped) +
           ") is not supported; only little-endian files are";
  }
  return "unsupported GGUF version " + std::to_string(version) + " (supported: 2, 3)";
}

}  // namespace

int64_t GgufTensorInfo::n_elems() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// =========================================================================================
// GgufFile: parsing and validation
// =========================================================================================

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  f.map_ = std::make_shared<MappedFile>(path);  // InvalidArgument when missing/unreadable
  const uint64_t file_bytes = static_cast<uint64_t>(f.map_->size_bytes());
  Cursor c(f.map_->data(), file_bytes, path);

  // ---- fixed header ----
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    char found[32];
    std::snprintf(found, sizeof(found), "%02x %02x %02x %02x", magic & 0xff, (magic >> 8) & 0xff,
                  (magic >> 16) & 0xff, magic >> 24);
    c.fail(std::string("not a GGUF file: magic bytes are ") + found +
           ", expected 47 47 55 46 (\"GGUF\")");
  }
  f.version_ = c.read<uint32_t>("version");
  if (f.version_ != 2 && f.version_ != 3) c.fail(describe_version_error(f.version_));
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");

  // ---- metadata ----
  if (n_kv > c.remaining() / kMinKvBytes) {
    c.fail("header declares " + std::to_string(n_kv) + " metadata pairs, but only " +
           std::to_string(c.remaining()) + " bytes remain (each needs at least " +
           std::to_string(kMinKvBytes) + ")");
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("key of metadata pair #" + std::to_string(i));
    const std::string what = "key " + single_quoted(key);
    const uint32_t type_raw = c.read<uint32_t>(what + " value type");
    if (!is_valid_type(type_raw)) {
      c.fail(what + ": value type " + std::to_string(type_raw) +
             " is not a GGUF value type (0..12)");
    }
    GgufValue value = read_value(c, static_cast<GgufType>(type_raw), what, 0);
    if (f.kv_.count(key) != 0) c.fail("duplicate metadata " + what);
    f.kv_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = f.find("general.alignment")) {
    if (!is_integer(a->type)) {
      c.fail("key 'general.alignment' has type " + std::string(gguf_type_name(a->type)) +
             ", expected u32");
    }
    const uint64_t alignment = f.get_uint("general.alignment");
    if (alignment == 0 || !std::has_single_bit(alignment) || alignment > (1u << 30)) {
      c.fail("key 'general.alignment' is " + std::to_string(alignment) +
             ", expected a power of two between 1 and 2^30");
    }
    f.alignment_ = alignment;
  } else {
    f.alignment_ = kDefaultAlignment;
  }

  // ---- tensor infos ----
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    c.fail("header declares " + std::to_string(n_tensors) + " tensors, but only " +
           std::to_string(c.remaining()) + " bytes remain (each tensor info needs at least " +
           std::to_string(kMinTensorInfoBytes) + ")");
  }
  f.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.read_string("name of tensor #" + std::to_string(i));
    const std::string what = "tensor " + single_quoted(t.name);
    if (f.tensor_index_.count(t.name) != 0) c.fail("duplicate " + what);

    const uint32_t n_dims = c.read<uint32_t>(what + " n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) {
      c.fail(what + ": n_dims is " + std::to_string(n_dims) + ", expected 1.." +
             std::to_string(kMaxDims));
    }
    uint64_t ne[kMaxDims] = {1, 1, 1, 1};
    int64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = c.read<uint64_t>(what + " ne[" + std::to_string(d) + "]");
      if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elems, static_cast<int64_t>(ne[d]), &n_elems)) {
        c.fail(what + ": element count overflows int64 (ne[" + std::to_string(d) +
               "] = " + std::to_string(ne[d]) + ")");
      }
    }
    for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(static_cast<int64_t>(ne[d]));

    const uint32_t ggml_type = c.read<uint32_t>(what + " type");
    const std::optional<DType> dtype = dtype_from_ggml(ggml_type);
    if (!dtype) {
      const std::string type_desc = "ggml type " + std::to_string(ggml_type) + " (" +
                                    std::string(ggml_type_name(ggml_type)) + ")";
      if (ggml_type < 40) {
        throw UnsupportedError(path + ": " + what + " has " + type_desc +
                               ", which LIO cannot read (supported: F32, F16, BF16, Q8_0, "
                               "Q4_0, Q4_1)");
      }
      c.fail(what + " has unknown " + type_desc);
    }
    t.dtype = *dtype;
    const DTypeInfo info = dtype_info(t.dtype);
    if (static_cast<int64_t>(ne[0]) % info.block_elems != 0) {
      c.fail(what + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
             std::string(info.name) + " block size " + std::to_string(info.block_elems));
    }
    if (n_elems / info.block_elems > std::numeric_limits<int64_t>::max() / info.block_bytes) {
      c.fail(what + ": byte size overflows int64");
    }
    t.size_bytes = n_elems / info.block_elems * info.block_bytes;

    t.offset = c.read<uint64_t>(what + " offset");
    if (t.offset % f.alignment_ != 0) {
      c.fail(what + ": data offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(f.alignment_));
    }
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // ---- tensor data: inside the file, not overlapping ----
  const uint64_t data_start = align_up(c.pos(), f.alignment_);
  const uint64_t data_bytes = data_start <= file_bytes ? file_bytes - data_start : 0;
  for (GgufTensorInfo& t : f.tensors_) {
    const auto size = static_cast<uint64_t>(t.size_bytes);
    if (data_start > file_bytes || t.offset > data_bytes || size > data_bytes - t.offset) {
      c.fail("tensor " + single_quoted(t.name) + ": data at offset " + std::to_string(t.offset) +
             " with " + std::to_string(size) + " bytes runs past the end of the file (data " +
             "section starts at byte " + std::to_string(data_start) + ", file has " +
             std::to_string(file_bytes) + " bytes)");
    }
    t.data = f.map_->data() + data_start + t.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : f.tensors_) {
    if (t.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& next = *by_offset[i];
    if (next.offset < prev.offset + static_cast<uint64_t>(prev.size_bytes)) {
      c.fail("tensor " + single_quoted(next.name) + " at offset " + std::to_string(next.offset) +
             " overlaps tensor " + single_quoted(prev.name) + " (offset " +
             std::to_string(prev.offset) + ", " + std::to_string(prev.size_bytes) + " bytes)");
    }
  }
  return f;
}

// =========================================================================================
// GgufFile: lookups and typed getters
// =========================================================================================

bool GgufFile::has(const std::string& key) const { return kv_.count(key) != 0; }

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t GgufFile::file_bytes() const { return map_ ? map_->size_bytes() : 0; }

namespace {

const GgufValue& require_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr)
    throw FormatError(f.path() + ": metadata key " + single_quoted(key) + " missing");
  return *v;
}

[[noreturn]] void throw_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const std::string& expected) {
  std::string actual(gguf_type_name(v.type));
  if (v.type == GgufType::Array) {
    actual += " of " +
              std::string(gguf_type_name(std::get<std::shared_ptr<GgufArray>>(v.data)->elem_type));
  }
  throw FormatError(f.path() + ": key " + single_quoted(key) + " has type " + actual +
                    ", expected " + expected);
}

const GgufArray& require_array(const GgufFile& f, const std::string& key, const GgufValue& v,
                               bool (*elem_ok)(GgufType), const std::string& expected) {
  if (v.type != GgufType::Array) throw_type(f, key, v, expected);
  const GgufArray& array = *std::get<std::shared_ptr<GgufArray>>(v.data);
  if (!elem_ok(array.elem_type)) throw_type(f, key, v, expected);
  return array;
}

// Integer value as int64 (uint64 values above INT64_MAX are reported, not wrapped).
int64_t to_int64(const GgufFile& f, const std::string& key, const GgufValue& v) {
  if (is_signed(v.type)) return std::get<int64_t>(v.data);
  const uint64_t u = std::get<uint64_t>(v.data);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw FormatError(f.path() + ": key " + single_quoted(key) + " holds " + std::to_string(u) +
                      ", which does not fit in int64");
  }
  return static_cast<int64_t>(u);
}

double to_double(const GgufValue& v) {
  if (is_float(v.type)) return std::get<double>(v.data);
  if (is_signed(v.type)) return static_cast<double>(std::get<int64_t>(v.data));
  return static_cast<double>(std::get<uint64_t>(v.data));
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufType::String) throw_type(*this, key, v, "string");
  return std::get<std::string>(v.data);
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (is_unsigned(v.type)) return std::get<uint64_t>(v.data);
  if (!is_signed(v.type)) throw_type(*this, key, v, "an integer");
  const int64_t i = std::get<int64_t>(v.data);
  if (i < 0) {
    throw FormatError(path_ + ": key " + single_quoted(key) + " is " + std::to_string(i) +
                      ", expected a non-negative integer");
  }
  return static_cast<uint64_t>(i);
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (!is_integer(v.type) && !is_float(v.type)) throw_type(*this, key, v, "a number");
  return to_double(v);
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufType::Bool) throw_type(*this, key, v, "bool");
  return std::get<bool>(v.data);
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  const GgufArray& array = require_array(
      *this, key, v, [](GgufType t) { return t == GgufType::String; }, "array of string");
  std::vector<std::string> out;
  out.reserve(array.items.size());
  for (const GgufValue& item : array.items) out.push_back(std::get<std::string>(item.data));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  const GgufArray& array = require_array(*this, key, v, is_integer, "array of integers");
  std::vector<int64_t> out;
  out.reserve(array.items.size());
  for (const GgufValue& item : array.items) out.push_back(to_int64(*this, key, item));
  return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  const GgufArray& array = require_array(
      *this, key, v, [](GgufType t) { return is_integer(t) || is_float(t); }, "array of numbers");
  std::vector<float> out;
  out.reserve(array.items.size());
  for (const GgufValue& item : array.items) out.push_back(static_cast<float>(to_double(item)));
  return out;
}

}  // namespace lio
