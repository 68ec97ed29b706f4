// gguf.h — GGUF v2/v3 files: the metadata and tensor types, and the reader (mmap,
// validated). The writer is in lio/gguf_writer.h.
//
// Source: the GGUF specification, ggml repository docs/gguf.md. Layout: magic "GGUF",
// u32 version, u64 tensor_count, u64 kv_count, kv pairs (string key, u32 value type,
// value), tensor infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset),
// padding to `general.alignment` (default 32), then tensor data. Strings are u64 length +
// UTF-8 bytes. ne[0] is the fastest-varying (innermost) dimension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "lio/dtype.h"
#include "lio/mapped_file.h"

namespace lio {

/// GGUF metadata value types (spec: gguf_metadata_value_type).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};

/// Lower-case spec name of a value type ("u32", "string", "array"), for messages.
std::string_view gguf_type_name(GgufType type);

struct GgufValue;
/// A homogeneous metadata array (arrays of arrays are allowed by the spec).
struct GgufArray {
  GgufType elem_type = GgufType::U8;  ///< type shared by every item
  std::vector<GgufValue> items;       ///< the elements, each with `type == elem_type`
};

/// One metadata value. Integers widen to int64/uint64, floats to double; `type` keeps
/// the on-disk type so a writer can reproduce it.
struct GgufValue {
  GgufType type = GgufType::U8;  ///< on-disk value type
  /// The value: uint64_t for unsigned, int64_t for signed, double for float types; bool,
  /// string, or a shared GgufArray for arrays.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> data;

  static GgufValue u32(uint32_t v);     ///< A u32 value.
  static GgufValue i32(int32_t v);      ///< An i32 value.
  static GgufValue u64(uint64_t v);     ///< A u64 value.
  static GgufValue f32(float v);        ///< An f32 value.
  static GgufValue boolean(bool v);     ///< A bool value.
  static GgufValue str(std::string v);  ///< A string value.
  /// An array of strings.
  static GgufValue str_array(std::vector<std::string> v);
  /// An array of i32.
  static GgufValue i32_array(std::vector<int32_t> v);
  /// An array of f32.
  static GgufValue f32_array(std::vector<float> v);
};

/// One tensor as described by the file. `shape` is row-major (outermost first), i.e. the
/// reverse of GGUF's ne[]: a weight with ne = {576, 1536} has shape {1536, 576}
/// (1536 rows of 576 contiguous elements).
struct GgufTensorInfo {
  std::string name;            ///< tensor name as stored (e.g. "blk.0.attn_q.weight")
  DType dtype = DType::F32;    ///< element type (from the ggml type id)
  std::vector<int64_t> shape;  ///< row-major, outermost first
  uint64_t offset = 0;         ///< bytes from the start of the data section
  int64_t size_bytes = 0;      ///< bytes of tensor data
  const std::byte* data = nullptr;  ///< into the mapping; valid while the GgufFile lives
  /// Number of elements: the product of `shape`.
  int64_t n_elems() const;
};

/// A GGUF file opened read-only via mmap and fully validated on open.
class GgufFile {
 public:
  /// Opens and parses `path`. Throws InvalidArgument if the file cannot be opened;
  /// FormatError (naming the file and the key/tensor) on bad magic, unsupported version
  /// (only 2 and 3), truncation, a string or array running past the end (every count is
  /// checked against the remaining bytes before allocating), an unknown value type, a bool
  /// other than 0/1, arrays nested deeper than 8, a bad `general.alignment`, n_dims outside
  /// 1..4, an element count overflowing int64, ne[0] not a multiple of the block size, a
  /// tensor with data past the end of the file, misaligned or overlapping another,
  /// duplicate keys or tensor names, or a ggml type id outside ggml's table;
  /// UnsupportedError naming the tensor and type for a ggml type LIO cannot read (e.g. Q5_K).
  /// Copies share the mapping; tensor `data` pointers stay valid while any copy lives.
  static GgufFile open(const std::string& path);

  /// Path the file was opened from.
  const std::string& path() const { return path_; }
  /// GGUF format version (2 or 3).
  uint32_t version() const { return version_; }
  /// Data-section alignment in bytes (`general.alignment`, default 32).
  uint64_t alignment() const { return alignment_; }

  /// All metadata, by key.
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  /// Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  /// True if metadata key `key` is present.
  bool has(const std::string& key) const;
  /// nullptr if absent.
  const GgufValue* find(const std::string& key) const;
  /// The tensor named `name`, or nullptr if absent.
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed getters: throw FormatError("<file>: key '<key>' missing" / "has type X, expected Y").
  /// String value of `key`.
  std::string get_string(const std::string& key) const;
  /// Any integer type; throws if negative or out of range.
  uint64_t get_uint(const std::string& key) const;
  /// Any integer or float type.
  double get_float(const std::string& key) const;
  /// Bool value of `key`.
  bool get_bool(const std::string& key) const;
  /// Array-of-string value of `key`.
  std::vector<std::string> get_string_array(const std::string& key) const;
  /// Array of any integer type; throws FormatError if an element does not fit in int64.
  std::vector<int64_t> get_int_array(const std::string& key) const;
  /// Array of any integer or float type, converted to float.
  std::vector<float> get_float_array(const std::string& key) const;

  /// Total bytes of the file.
  int64_t file_bytes() const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::shared_ptr<MappedFile> map_;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace lio
