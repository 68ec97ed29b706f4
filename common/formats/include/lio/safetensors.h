// safetensors.h — reader (mmap, validated) and writer for the safetensors format, and
// sharded checkpoints (model.safetensors.index.json).
//
// Source: the safetensors format spec (huggingface/safetensors README, "Format"):
// u64 little-endian header length N, N bytes of JSON header mapping tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the
// header), optional "__metadata__" string map, then the data buffer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lio/dtype.h"
#include "lio/mapped_file.h"

namespace lio {

/// One tensor of a safetensors file. Only F32, F16 and BF16 map to a DType; other
/// dtypes (I64, U8, ...) are listed with `dtype_name` but `dtype` unset and rejected on use.
struct SafetensorsTensor {
  std::string name;                ///< tensor name as in the header
  std::string dtype_name;          ///< as in the header: "F32", "F16", "BF16", ...
  DType dtype = DType::F32;        ///< valid when supported == true
  bool supported = false;          ///< dtype is F32, F16 or BF16
  std::vector<int64_t> shape;      ///< row-major, as written
  int64_t size_bytes = 0;          ///< bytes of tensor data (data_offsets end - begin)
  const std::byte* data = nullptr; ///< into the mapping of `file`
  std::string file;                ///< which shard it came from
};

/// All tensors of a single file or a sharded checkpoint, with the mappings kept alive.
class SafetensorsSet {
 public:
  /// Opens one `.safetensors` file. Throws InvalidArgument if missing; FormatError naming
  /// the file and tensor on a bad header length, invalid JSON, a missing or mistyped field,
  /// a dtype name not in the spec, offsets past the end, overlapping offsets, a hole
  /// between tensors or bytes after the last one (the reference implementation's rule:
  /// tensors tile the data buffer), or a byte count that does not match dtype x shape.
  /// `data` pointers are not necessarily aligned to the element size.
  static SafetensorsSet open_file(const std::string& path);
  /// Opens a HF model directory: `model.safetensors`, or the shards listed in
  /// `model.safetensors.index.json` ("weight_map"). Throws as open_file, plus FormatError
  /// when the index is not valid JSON, names a shard that is missing or outside `dir`, or a
  /// tensor not found in its shard, or when two shards hold the same tensor;
  /// InvalidArgument when `dir` is missing or has neither file.
  static SafetensorsSet open_dir(const std::string& dir);

  /// All tensors, by name.
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  /// nullptr if absent.
  const SafetensorsTensor* find(const std::string& name) const;
  /// Metadata of the first file's "__metadata__" (may be empty).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::shared_ptr<MappedFile>> maps_;
  void add_file(const std::string& path);
};

/// Writes a single safetensors file (test fixtures and tools). Supported dtypes: F32, F16, BF16.
/// Tensors are stored in insertion order; the header is space-padded to a multiple of 8 bytes.
class SafetensorsWriter {
 public:
  /// Throws InvalidArgument on a duplicate name, an unsupported dtype or a wrong byte count.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                  std::span<const std::byte> data);
  /// Convenience: converts f32 values to `dtype` (F32/F16/BF16).
  void add_tensor_f32(const std::string& name, DType dtype, std::vector<int64_t> shape,
                      std::span<const float> values);
  /// An I32 tensor (token ids, offsets: `lio spec-data`'s tokens and seq_starts), stored as the
  /// spec's "I32" little-endian. Throws InvalidArgument on a duplicate name or a shape whose
  /// element count is not values.size().
  void add_tensor_i32(const std::string& name, std::vector<int64_t> shape, std::span<const int32_t> values);
  /// Sets `key` in the header's "__metadata__" map, replacing an earlier value.
  void set_metadata(const std::string& key, const std::string& value);
  /// Writes the file to `path` atomically (AtomicFileWriter: a temporary, then rename; a kill
  /// mid-write leaves no half file). Throws InvalidArgument if the file cannot be written.
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    std::string dtype_name;  ///< the header's dtype ("F32", "I32", ...)
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  /// Throws InvalidArgument for a reserved or duplicate name or a bad shape; returns the
  /// element count.
  int64_t check_new_tensor(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lio
