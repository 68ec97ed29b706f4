// safetensors.cpp — validated safetensors reader (single file and sharded directory) and writer.
//
// Source: huggingface/safetensors README ("Format") and the reference implementation's
// `Metadata::validate`: tensors, sorted by offset, must tile the data buffer exactly (no
// overlap, no hole, nothing after the last tensor), and each byte range must equal
// product(shape) x element size. Sharded checkpoints: transformers' `model.safetensors.index.json`
// with a "weight_map" {tensor name: shard file name}.
#include "lio/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "lio/atomic_file.h"
#include "lio/error.h"

namespace lio {

static_assert(std::endian::native == std::endian::little,
              "the safetensors header length is read as a little-endian u64 by memcpy");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";

/// A safetensors dtype name, its element width in bits, and the DType LIO reads it as.
struct StDtype {
  std::string_view name;
  int64_t bits;
  std::optional<DType> dtype;
};

// Every dtype the safetensors spec lists; only F32/F16/BF16 are supported for compute.
// clang-format off
constexpr StDtype kStDtypes[] = {
    {"F32", 32, DType::F32},    {"F16", 16, DType::F16},       {"BF16", 16, DType::BF16},
    {"F64", 64, std::nullopt},  {"I64", 64, std::nullopt},     {"U64", 64, std::nullopt},
    {"I32", 32, std::nullopt},  {"U32", 32, std::nullopt},     {"I16", 16, std::nullopt},
    {"U16", 16, std::nullopt},  {"I8", 8, std::nullopt},       {"U8", 8, std::nullopt},
    {"BOOL", 8, std::nullopt},  {"F8_E4M3", 8, std::nullopt},  {"F8_E5M2", 8, std::nullopt},
    {"F8_E8M0", 8, std::nullopt}, {"C64", 64, std::nullopt},   {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt}, {"F4", 4, std::nullopt},
};
// clang-format on

const StDtype* find_st_dtype(std::string_view name) {
  for (const StDtype& d : kStDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string_view st_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: return {};
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw FormatError(path + ": " + msg);
}

int64_t json_to_nonneg(const std::string& path, const std::string& what, const json& v) {
  if (!v.is_number_unsigned() ||
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail(path, what + " must be a non-negative integer, found " + v.dump());
  }
  return static_cast<int64_t>(v.get<uint64_t>());
}

/// Reads a whole small text file (index JSON). Throws InvalidArgument when unreadable.
std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// =========================================================================================
// Reader
// =========================================================================================

const SafetensorsTensor* SafetensorsSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsSet::add_file(const std::string& path) {
  auto map = std::make_shared<MappedFile>(path);  // InvalidArgument when missing
  const auto file_bytes = static_cast<uint64_t>(map->size_bytes());
  if (file_bytes < 8) {
    fail(path, "file is " + std::to_string(file_bytes) +
                   " bytes, too short for the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, map->data(), 8);
  if (header_bytes > file_bytes - 8) {
    fail(path, "header length " + std::to_string(header_bytes) +
                   " exceeds the file size minus 8 (" + std::to_string(file_bytes - 8) + ")");
  }
  const auto* header_begin = reinterpret_cast<const char*>(map->data()) + 8;
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_bytes);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start;

  std::map<std::string, std::string> metadata;
  if (auto it = header.find(kMetadataKey); it != header.end()) {
    if (!it->is_object()) fail(path, "\"__metadata__\" is not a JSON object");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        fail(path,
             "\"__metadata__\" key " + single_quoted(key) + " is not a string: " + value.dump());
      }
      metadata[key] = value.get<std::string>();
    }
  }

  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  std::vector<SafetensorsTensor> parsed;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) continue;
    const std::string what = "tensor " + single_quoted(name);
    if (!entry.is_object()) fail(path, what + ": entry is not a JSON object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      fail(path, what + ": missing string field \"dtype\"");
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      fail(path, what + ": missing array field \"shape\"");
    }
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      fail(path, what + ": \"data_offsets\" must be an array [begin, end]");
    }

    SafetensorsTensor t;
    t.name = name;
    t.file = path;
    t.dtype_name = dtype_it->get<std::string>();
    int64_t n_elems = 1;
    for (size_t d = 0; d < shape_it->size(); ++d) {
      const int64_t dim =
          json_to_nonneg(path, what + ": shape[" + std::to_string(d) + "]", (*shape_it)[d]);
      if (__builtin_mul_overflow(n_elems, dim, &n_elems)) {
        fail(path, what + ": element count of shape " + shape_it->dump() + " overflows int64");
      }
      t.shape.push_back(dim);
    }
    const auto begin =
        static_cast<uint64_t>(json_to_nonneg(path, what + ": data_offsets[0]", (*offsets_it)[0]));
    const auto end =
        static_cast<uint64_t>(json_to_nonneg(path, what + ": data_offsets[1]", (*offsets_it)[1]));
    if (begin > end || end > data_bytes) {
      fail(path, what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] are not an ordered range inside the " + std::to_string(data_bytes) +
                     "-byte data buffer");
    }
    t.size_bytes = static_cast<int64_t>(end - begin);

    const StDtype* st = find_st_dtype(t.dtype_name);
    if (st == nullptr) fail(path, what + ": unknown dtype " + single_quoted(t.dtype_name));
    if (n_elems > std::numeric_limits<int64_t>::max() / st->bits) {
      fail(path, what + ": byte size of shape " + shape_it->dump() + " overflows int64");
    }
    const int64_t bits = n_elems * st->bits;
    if (bits % 8 != 0 || bits / 8 != t.size_bytes) {
      fail(path, what + ": data_offsets span " + std::to_string(t.size_bytes) +
                     " bytes, expected " + std::to_string(n_elems) + " x " +
                     std::to_string(st->bits) + " bits = " + std::to_string(bits / 8) +
                     " bytes for " + t.dtype_name + " " + shape_it->dump());
    }
    if (st->dtype) {
      t.dtype = *st->dtype;
      t.supported = true;
    }
    t.data = map->data() + data_start + begin;
    ranges.push_back({begin, end, name});
    parsed.push_back(std::move(t));
  }

  // The tensors must tile the data buffer: sorted by offset, each starts where the last ended.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected_begin = 0;
  std::string prev_name;
  for (const Range& r : ranges) {
    if (r.begin != expected_begin) {
      fail(path, "tensor " + single_quoted(r.name) + " starts at data offset " +
                     std::to_string(r.begin) + ", expected " + std::to_string(expected_begin) +
                     (prev_name.empty() ? std::string(" (the start of the data buffer)")
                                        : " (the end of tensor " + single_quoted(prev_name) + ")") +
                     (r.begin < expected_begin ? ": tensors overlap" : ": hole in the data"));
    }
    expected_begin = r.end;
    prev_name = r.name;
  }
  if (expected_begin != data_bytes) {
    fail(path, "tensors cover " + std::to_string(expected_begin) + " bytes of the " +
                   std::to_string(data_bytes) +
                   "-byte data buffer; trailing bytes are not allowed");
  }

  for (SafetensorsTensor& t : parsed) {
    if (const SafetensorsTensor* other = find(t.name)) {
      fail(path,
           "tensor " + single_quoted(t.name) + " also appears in " + single_quoted(other->file));
    }
  }
  if (maps_.empty()) metadata_ = std::move(metadata);
  for (SafetensorsTensor& t : parsed) tensors_.emplace(t.name, std::move(t));
  maps_.push_back(std::move(map));
}

SafetensorsSet SafetensorsSet::open_file(const std::string& path) {
  SafetensorsSet set;
  set.add_file(path);
  return set;
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw InvalidArgument("cannot open model directory '" + dir +
                          "': " + (fs::exists(dir, ec) ? "not a directory" : "does not exist"));
  }
  const std::string index_path = (fs::path(dir) / kIndexFile).string();
  const std::string single_path = (fs::path(dir) / kSingleFile).string();
  SafetensorsSet set;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      throw InvalidArgument("cannot open model directory '" + dir + "': it has neither " +
                            kSingleFile + " nor " + kIndexFile);
    }
    set.add_file(single_path);
    return set;
  }

  json index;
  try {
    index = json::parse(read_text_file(index_path));
  } catch (const json::exception& e) {
    fail(index_path, std::string("not valid JSON: ") + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail(index_path, "missing object \"weight_map\"");
  }
  const json& weight_map = index["weight_map"];
  std::set<std::string> shards;  // sorted, so shard 00001 is opened (and gives metadata) first
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string()) {
      fail(index_path, "weight_map entry for tensor " + single_quoted(tensor) + " is not a string");
    }
    const fs::path shard_path(shard.get<std::string>());
    const bool escapes = std::any_of(shard_path.begin(), shard_path.end(),
                                     [](const fs::path& part) { return part == ".."; });
    if (shard_path.empty() || shard_path.is_absolute() || escapes) {
      fail(index_path, "weight_map entry for tensor " + single_quoted(tensor) + " names shard " +
                           shard.dump() + ", expected a file name inside the directory");
    }
    shards.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shards) {
    const std::string shard_path = (fs::path(dir) / shard).string();
    if (!fs::is_regular_file(shard_path, ec)) {
      fail(index_path, "weight_map names shard " + single_quoted(shard) + ", but '" + shard_path +
                           "' does not exist");
    }
    set.add_file(shard_path);
  }
  for (const auto& [tensor, shard] : weight_map.items()) {
    const std::string shard_path = (fs::path(dir) / shard.get<std::string>()).string();
    const SafetensorsTensor* t = set.find(tensor);
    if (t == nullptr || t->file != shard_path) {
      fail(index_path, "weight_map puts tensor " + single_quoted(tensor) + " in shard " +
                           single_quoted(shard.get<std::string>()) +
                           ", but that shard has no such tensor");
    }
  }
  return set;
}

// =========================================================================================
// Writer
// =========================================================================================

void SafetensorsWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                   std::span<const std::byte> data) {
  const std::string what = "SafetensorsWriter: tensor " + single_quoted(name);
  if (st_dtype_name(dtype).empty()) {
    throw InvalidArgument(what + ": dtype " + std::string(dtype_info(dtype).name) +
                          " is not supported (supported: F32, F16, BF16)");
  }
  const int64_t n_elems = check_new_tensor(name, shape);
  const int64_t expected_bytes = dtype_row_bytes(dtype, n_elems);
  if (static_cast<int64_t>(data.size()) != expected_bytes) {
    throw InvalidArgument(what + ": data has " + std::to_string(data.size()) + " bytes, expected " +
                          std::to_string(expected_bytes));
  }
  tensors_.push_back({name, std::string(st_dtype_name(dtype)), std::move(shape), {data.begin(), data.end()}});
}

int64_t SafetensorsWriter::check_new_tensor(const std::string& name, const std::vector<int64_t>& shape) const {
  const std::string what = "SafetensorsWriter: tensor " + single_quoted(name);
  if (name == kMetadataKey) throw InvalidArgument(what + ": reserved name");
  for (const Pending& t : tensors_) {
    if (t.name == name) throw InvalidArgument(what + ": duplicate tensor name");
  }
  int64_t n_elems = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(n_elems, dim, &n_elems)) {
      throw InvalidArgument(what + ": invalid or overflowing shape dimension " +
                            std::to_string(dim));
    }
  }
  return n_elems;
}

void SafetensorsWriter::add_tensor_i32(const std::string& name, std::vector<int64_t> shape,
                                       std::span<const int32_t> values) {
  const int64_t n_elems = check_new_tensor(name, shape);
  if (n_elems != static_cast<int64_t>(values.size())) {
    throw InvalidArgument("SafetensorsWriter: tensor " + single_quoted(name) + ": " + std::to_string(values.size()) +
                          " values for " + std::to_string(n_elems) + " elements");
  }
  const auto* bytes = reinterpret_cast<const std::byte*>(values.data());  // little-endian hosts only (x86, arm64)
  tensors_.push_back({name, "I32", std::move(shape), {bytes, bytes + values.size_bytes()}});
}

void SafetensorsWriter::add_tensor_f32(const std::string& name, DType dtype,
                                       std::vector<int64_t> shape, std::span<const float> values) {
  if (st_dtype_name(dtype).empty()) {
    throw InvalidArgument("SafetensorsWriter: tensor " + single_quoted(name) + ": dtype " +
                          std::string(dtype_info(dtype).name) +
                          " is not supported (supported: F32, F16, BF16)");
  }
  const auto n_elems = static_cast<int64_t>(values.size());
  std::vector<std::byte> bytes(static_cast<size_t>(dtype_row_bytes(dtype, n_elems)));
  quantize_row(dtype, values.data(), bytes.data(), n_elems);  // F32/F16/BF16 conversion
  add_tensor(name, dtype, std::move(shape), bytes);           // checks the element count
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    header[t.name] = {{"dtype", t.dtype_name},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data buffer starts 8-byte aligned, as the reference writer does.
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t header_bytes = text.size();

  AtomicFileWriter file(path);  // a kill mid-write leaves no half file at `path`
  std::ofstream& out = file.stream();
  out.write(reinterpret_cast<const char*>(&header_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Pending& t : tensors_) {
    out.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size()));
  }
  file.commit();
}

}  // namespace lio
