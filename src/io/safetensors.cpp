// safetensors: 8-byte little-endian header length N, N bytes of JSON, then the data. The checks
// follow the reference implementation: N capped at 100 MB and inside the file, a JSON object,
// known dtypes, offsets that tile the data section exactly, sizes equal to numel x dtype size.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/checked_math.h"

namespace tensorpar {
namespace {

// Known dtypes that we cannot hold in memory: their sizes still validate the file.
const StoredFormat kStoredI8{"I8", 1, 1, std::nullopt, nullptr};
const StoredFormat kStoredI16{"I16", 1, 2, std::nullopt, nullptr};
const StoredFormat kStoredU16{"U16", 1, 2, std::nullopt, nullptr};
const StoredFormat kStoredU32{"U32", 1, 4, std::nullopt, nullptr};
const StoredFormat kStoredU64{"U64", 1, 8, std::nullopt, nullptr};
const StoredFormat kStoredBool{"BOOL", 1, 1, std::nullopt, nullptr};
const StoredFormat kStoredF8E4M3{"F8_E4M3", 1, 1, std::nullopt, nullptr};
const StoredFormat kStoredF8E5M2{"F8_E5M2", 1, 1, std::nullopt, nullptr};
const StoredFormat kStoredF8E8M0{"F8_E8M0", 1, 1, std::nullopt, nullptr};

constexpr int kMaxJsonDepth = 16;

int64_t json_nonneg_int(const nlohmann::json& v, const std::string& file, const std::string& tensor,
                        const char* field) {
  TP_CHECK(
      v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
      "[load_safetensors] '", file, "': tensor '", tensor, "' has a bad ", field, " entry: got ",
      v.dump(), ", expected a non-negative integer");
  return int64_t(v.get<uint64_t>());
}

}  // namespace

const StoredFormat* safetensors_format(std::string_view dtype) {
  static const StoredFormat* const all[] = {
      &kStoredF64,  &kStoredF32,    &kStoredF16,    &kStoredBF16,  &kStoredI64, &kStoredI32,
      &kStoredI16,  &kStoredI8,     &kStoredU8,     &kStoredU16,   &kStoredU32, &kStoredU64,
      &kStoredBool, &kStoredF8E4M3, &kStoredF8E5M2, &kStoredF8E8M0};
  for (const StoredFormat* f : all)
    if (dtype == f->name) return f;
  return nullptr;
}

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& name) {
  const int64_t size = int64_t(file.size());
  TP_CHECK(size >= 8, "[load_safetensors] '", name, "' is truncated: got ", size,
           " bytes, expected at least 8 for the header length");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);  // little-endian hosts only (x86-64, aarch64)
  TP_CHECK(n <= uint64_t(kSafetensorsMaxHeader), "[load_safetensors] '", name, "': header length ",
           n, " exceeds the limit of ", kSafetensorsMaxHeader, " bytes");
  TP_CHECK(int64_t(n) <= size - 8, "[load_safetensors] '", name, "': header length ", n,
           " exceeds file size ", size);
  SafetensorsHeader h;
  h.data_start = 8 + int64_t(n);
  const auto* text = reinterpret_cast<const char*>(file.data() + 8);
  TP_CHECK(n > 0 && text[0] == '{', "[load_safetensors] '", name,
           "': header does not start with '{' (not a safetensors file?)");

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, text + n,
                              [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
                                TP_CHECK(depth <= kMaxJsonDepth, "[load_safetensors] '", name,
                                         "': header JSON nested deeper than ", kMaxJsonDepth);
                                return true;
                              });
  } catch (const nlohmann::json::exception& e) {
    TP_CHECK(false, "[load_safetensors] '", name, "': header is not valid JSON: ", e.what());
  }
  TP_CHECK(j.is_object(), "[load_safetensors] '", name, "': header is not a JSON object");

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      TP_CHECK(v.is_object(), "[load_safetensors] '", name, "': __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        TP_CHECK(m.value().is_string(), "[load_safetensors] '", name, "': __metadata__ value of '",
                 m.key(), "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    TP_CHECK(v.is_object(), "[load_safetensors] '", name, "': entry '", key, "' is not an object");
    const auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    TP_CHECK(dt != v.end() && sh != v.end() && off != v.end(), "[load_safetensors] '", name,
             "': tensor '", key, "' lacks dtype, shape or data_offsets");
    TP_CHECK(dt->is_string(), "[load_safetensors] '", name, "': tensor '", key,
             "' dtype is not a string");
    SafetensorsEntry e;
    e.name = key;
    e.format = safetensors_format(dt->get<std::string>());
    TP_CHECK(e.format, "[load_safetensors] '", name, "': tensor '", key, "' has unknown dtype '",
             dt->get<std::string>(), "'");
    TP_CHECK(sh->is_array(), "[load_safetensors] '", name, "': tensor '", key,
             "' shape is not an array");
    for (const auto& d : *sh) e.shape.push_back(json_nonneg_int(d, name, key, "shape"));
    TP_CHECK(off->is_array() && off->size() == 2, "[load_safetensors] '", name, "': tensor '", key,
             "' data_offsets is not [begin, end]");
    e.begin = json_nonneg_int((*off)[0], name, key, "data_offsets");
    e.end = json_nonneg_int((*off)[1], name, key, "data_offsets");
    h.entries.push_back(std::move(e));
  }

  // Offsets must tile [0, data size) in order: contiguous, no overlap, no gap, no slack.
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const int64_t data_size = size - h.data_start;
  int64_t pos = 0;
  for (const SafetensorsEntry& e : h.entries) {
    TP_CHECK(e.begin == pos && e.end >= e.begin, "[load_safetensors] '", name, "': tensor '",
             e.name, "' has data_offsets [", e.begin, ", ", e.end, "], expected to begin at ", pos,
             " (offsets must be contiguous and non-overlapping)");
    TP_CHECK(e.end <= data_size, "[load_safetensors] '", name, "': tensor '", e.name, "' ends at ",
             e.end, ", past the data section of ", data_size, " bytes (file truncated?)");
    const int64_t numel = file_shape_numel(e.shape, "load_safetensors");
    const int64_t nbytes = checked_mul(numel, e.format->block_bytes, "load_safetensors");
    TP_CHECK(e.end - e.begin == nbytes, "[load_safetensors] '", name, "': tensor '", e.name, "' ",
             e.format->name, shape_str(e.shape), " needs ", nbytes, " bytes, but data_offsets [",
             e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    pos = e.end;
  }
  TP_CHECK(pos == data_size, "[load_safetensors] '", name, "': tensors cover ", pos,
           " bytes of a data section of ", data_size, " bytes");
  return h;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto file = MappedFile::open(path);
  SafetensorsHeader h = parse_safetensors(file->bytes(), path);
  return std::shared_ptr<SafetensorsFile>(new SafetensorsFile(std::move(file), std::move(h)));
}

SafetensorsFile::SafetensorsFile(std::shared_ptr<MappedFile> file, SafetensorsHeader header)
    : file_(std::move(file)), header_(std::move(header)) {
  for (size_t i = 0; i < header_.entries.size(); ++i) index_[header_.entries[i].name] = i;
}

TensorInfo SafetensorsFile::info_of(const SafetensorsEntry& e) const {
  return TensorInfo{
      e.name,          e.shape,      e.format->name, e.format->dtype, header_.data_start + e.begin,
      e.end - e.begin, file_->path()};
}

std::vector<TensorInfo> SafetensorsFile::tensors() const {
  std::vector<TensorInfo> out;
  for (const auto& e : header_.entries) out.push_back(info_of(e));
  return out;
}

std::optional<TensorInfo> SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return info_of(header_.entries[it->second]);
}

StoredTensor SafetensorsFile::stored(std::string_view name) const {
  auto it = index_.find(name);
  TP_CHECK(it != index_.end(), "[SafetensorsFile] tensor '", name, "' not found in '",
           file_->path(), "'");
  const SafetensorsEntry& e = header_.entries[it->second];
  return StoredTensor{e.name,
                      file_->path(),
                      e.shape,
                      e.format,
                      file_->data() + header_.data_start + e.begin,
                      e.end - e.begin,
                      file_};
}

}  // namespace tensorpar
