// GGUF parsing. The file is untrusted: every read is bounds-checked, every count is bounded by
// the bytes left (an element takes at least its minimum encoded size) before anything is
// reserved, and size arithmetic is overflow-checked (the llama.cpp parser CVEs of 2024).
#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/checked_math.h"

namespace tensorpar {
namespace {

constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;

class Reader {
 public:
  Reader(std::span<const std::byte> b, const std::string& name) : b_(b), name_(name) {}
  int64_t pos() const { return pos_; }
  int64_t left() const { return int64_t(b_.size()) - pos_; }
  const std::string& name() const { return name_; }

  void need(int64_t n, const char* what) const {
    TP_CHECK(n >= 0 && n <= left(), "[load_gguf] '", name_, "' is truncated: reading ", what,
             " at offset ", pos_, " needs ", n, " bytes, ", left(), " left");
  }
  template <typename T>
  T pod(const char* what) {
    need(int64_t(sizeof(T)), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += int64_t(sizeof(T));
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = pod<uint64_t>(what);
    TP_CHECK(n <= uint64_t(left()), "[load_gguf] '", name_, "': ", what, " length ", n,
             " at offset ", pos_ - 8, " exceeds the ", left(), " bytes left in the file");
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), size_t(n));
    pos_ += int64_t(n);
    return s;
  }
  void bytes(std::vector<std::byte>& out, int64_t n, const char* what) {
    need(n, what);
    out.assign(b_.begin() + pos_, b_.begin() + pos_ + n);
    pos_ += n;
  }
  // A count of elements that take at least min_size bytes each must fit in what is left.
  int64_t count(uint64_t n, int64_t min_size, const char* what) const {
    TP_CHECK(n <= uint64_t(left()) / uint64_t(min_size), "[load_gguf] '", name_, "': ", what,
             " count ", n, " at offset ", pos_, " cannot fit in the ", left(),
             " bytes left in the file");
    return int64_t(n);
  }

 private:
  std::span<const std::byte> b_;
  const std::string& name_;
  int64_t pos_ = 0;
};

GgufType read_type(Reader& r, const char* what) {
  const uint32_t t = r.pod<uint32_t>(what);
  TP_CHECK(t <= uint32_t(GgufType::kF64), "[load_gguf] '", r.name(),
           "': unknown metadata value type ", t, " at offset ", r.pos() - 4, ", expected 0..12");
  return GgufType(t);
}

// Smallest encoding of one value of type t: scalars their size, strings 8, arrays 12.
int64_t min_encoded_size(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return gguf_scalar_size(t);
}

void read_array(Reader& r, GgufArray& a, int depth);

void read_value(Reader& r, GgufType t, GgufValue& v, int depth) {
  v.type = t;
  switch (t) {
    case GgufType::kU8:
      v.u = r.pod<uint8_t>("u8");
      break;
    case GgufType::kI8:
      v.i = r.pod<int8_t>("i8");
      break;
    case GgufType::kU16:
      v.u = r.pod<uint16_t>("u16");
      break;
    case GgufType::kI16:
      v.i = r.pod<int16_t>("i16");
      break;
    case GgufType::kU32:
      v.u = r.pod<uint32_t>("u32");
      break;
    case GgufType::kI32:
      v.i = r.pod<int32_t>("i32");
      break;
    case GgufType::kU64:
      v.u = r.pod<uint64_t>("u64");
      break;
    case GgufType::kI64:
      v.i = r.pod<int64_t>("i64");
      break;
    case GgufType::kF32:
      v.f = r.pod<float>("f32");
      break;
    case GgufType::kF64:
      v.f = r.pod<double>("f64");
      break;
    case GgufType::kBool:
      v.u = r.pod<uint8_t>("bool") ? 1 : 0;
      break;
    case GgufType::kString:
      v.str = r.str("string value");
      break;
    case GgufType::kArray:
      read_array(r, v.array, depth + 1);
      break;
  }
}

void read_array(Reader& r, GgufArray& a, int depth) {
  TP_CHECK(depth <= kMaxArrayDepth, "[load_gguf] '", r.name(), "': arrays nested deeper than ",
           kMaxArrayDepth, " at offset ", r.pos());
  a.elem_type = read_type(r, "array element type");
  a.count = r.count(r.pod<uint64_t>("array count"), min_encoded_size(a.elem_type), "array");
  if (a.elem_type == GgufType::kString) {
    a.strings.reserve(size_t(a.count));
    for (int64_t k = 0; k < a.count; ++k) a.strings.push_back(r.str("array string"));
  } else if (a.elem_type == GgufType::kArray) {
    a.arrays.resize(size_t(a.count));
    for (auto& sub : a.arrays) read_array(r, sub, depth + 1);
  } else {
    r.bytes(a.raw, a.count * gguf_scalar_size(a.elem_type), "array data");
  }
}

}  // namespace

GgufHeader parse_gguf(std::span<const std::byte> file, const std::string& name) {
  Reader r(file, name);
  TP_CHECK(file.size() >= 4, "[load_gguf] '", name, "' is truncated: got ", file.size(),
           " bytes, expected at least 24 for the GGUF header");
  TP_CHECK(std::memcmp(file.data(), "GGUF", 4) == 0, "[load_gguf] '", name, "': bad magic: got '",
           std::string(reinterpret_cast<const char*>(file.data()), 4), "', expected 'GGUF'");
  r.pod<uint32_t>("magic");
  GgufHeader h;
  h.metadata = GgufMetadata(name);
  h.version = r.pod<uint32_t>("version");
  TP_CHECK(h.version != 0x03000000u && h.version != 0x02000000u, "[load_gguf] '", name,
           "': big-endian GGUF files are not supported");
  TP_CHECK(h.version == 2 || h.version == 3, "[load_gguf] '", name, "': unsupported GGUF version ",
           h.version, ", expected 2 or 3");
  const uint64_t n_tensors_raw = r.pod<uint64_t>("tensor count");
  const uint64_t n_kv_raw = r.pod<uint64_t>("metadata count");
  // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
  // least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
  const int64_t n_kv = r.count(n_kv_raw, 13, "metadata key/value");

  for (int64_t k = 0; k < n_kv; ++k) {
    std::string key = r.str("metadata key");
    GgufValue v;
    read_value(r, read_type(r, "metadata value type"), v, 0);
    h.metadata.add(std::move(key), std::move(v));
  }
  if (const GgufValue* a = h.metadata.find("general.alignment")) {
    TP_CHECK(a->type == GgufType::kU32 && a->u != 0 && (a->u & (a->u - 1)) == 0, "[load_gguf] '",
             name, "': general.alignment must be a u32 power of two, got ",
             GgufMetadata::describe(*a));
    h.alignment = uint32_t(a->u);
  }

  const int64_t n_tensors = r.count(n_tensors_raw, 32, "tensor info");
  h.tensors.reserve(size_t(n_tensors));
  std::map<std::string, size_t, std::less<>> seen;
  for (int64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = r.str("tensor name");
    const uint32_t nd = r.pod<uint32_t>("tensor n_dims");
    TP_CHECK(nd >= 1 && nd <= kMaxDims, "[load_gguf] '", name, "': tensor '", t.name,
             "' has n_dims ", nd, ", expected 1..", kMaxDims);
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t dim = r.pod<uint64_t>("tensor dim");
      TP_CHECK(dim <= uint64_t(std::numeric_limits<int64_t>::max()), "[load_gguf] '", name,
               "': tensor '", t.name, "' dim ", d, " is ", dim, ", too large");
      t.dims.push_back(int64_t(dim));
    }
    t.shape.assign(t.dims.rbegin(), t.dims.rend());
    const int64_t numel = file_shape_numel(t.shape, "load_gguf");
    t.ggml_type = r.pod<uint32_t>("tensor type");
    t.format = ggml_format(t.ggml_type);
    TP_CHECK(t.format, "[load_gguf] '", name, "': tensor '", t.name, "' has unknown ggml type ",
             t.ggml_type);
    TP_CHECK(t.dims[0] % t.format->block_elems == 0, "[load_gguf] '", name, "': tensor '", t.name,
             "' of type ", t.format->name, " has contiguous dim ", t.dims[0],
             ", not a multiple of its ", t.format->block_elems, "-element blocks");
    t.nbytes = checked_mul(numel / t.format->block_elems, t.format->block_bytes, "load_gguf");
    const uint64_t off = r.pod<uint64_t>("tensor offset");
    TP_CHECK(off % h.alignment == 0 && off <= uint64_t(std::numeric_limits<int64_t>::max()),
             "[load_gguf] '", name, "': tensor '", t.name, "' offset ", off,
             " is not a multiple of the alignment ", h.alignment);
    t.offset = int64_t(off);
    TP_CHECK(seen.emplace(t.name, h.tensors.size()).second, "[load_gguf] '", name,
             "': duplicate tensor name '", t.name, "'");
    h.tensors.push_back(std::move(t));
  }

  const int64_t pad = (h.alignment - r.pos() % h.alignment) % h.alignment;
  h.data_start = r.pos() + pad;
  const int64_t size = int64_t(file.size());
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : h.tensors) {
    const int64_t end =
        checked_add(checked_add(h.data_start, t.offset, "load_gguf"), t.nbytes, "load_gguf");
    TP_CHECK(end <= size, "[load_gguf] '", name, "': tensor '", t.name, "' ", t.format->name,
             shape_str(t.shape), " occupies [", h.data_start + t.offset, ", ", end,
             ") past the end of the file (", size, " bytes; truncated?)");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    TP_CHECK(a.offset + a.nbytes <= b.offset || a.nbytes == 0 || b.nbytes == 0, "[load_gguf] '",
             name, "': tensors '", a.name, "' [", a.offset, ", ", a.offset + a.nbytes, ") and '",
             b.name, "' [", b.offset, ", ", b.offset + b.nbytes, ") overlap");
  }
  return h;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto file = MappedFile::open(path);
  GgufHeader h = parse_gguf(file->bytes(), path);
  return std::shared_ptr<GgufFile>(new GgufFile(std::move(file), std::move(h)));
}

GgufFile::GgufFile(std::shared_ptr<MappedFile> file, GgufHeader header)
    : file_(std::move(file)), header_(std::move(header)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

const GgufTensorInfo* GgufFile::gguf_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

TensorInfo GgufFile::info_of(const GgufTensorInfo& t) const {
  return TensorInfo{
      t.name,   t.shape,      t.format->name, t.format->dtype, header_.data_start + t.offset,
      t.nbytes, file_->path()};
}

std::vector<TensorInfo> GgufFile::tensors() const {
  std::vector<TensorInfo> out;
  for (const auto& t : header_.tensors) out.push_back(info_of(t));
  return out;
}

std::optional<TensorInfo> GgufFile::find(std::string_view name) const {
  const GgufTensorInfo* t = gguf_tensor(name);
  if (!t) return std::nullopt;
  return info_of(*t);
}

StoredTensor GgufFile::stored(std::string_view name) const {
  const GgufTensorInfo* t = gguf_tensor(name);
  TP_CHECK(t, "[GgufFile] tensor '", name, "' not found in '", file_->path(), "'");
  return StoredTensor{
      t->name,   file_->path(), t->shape, t->format, file_->data() + header_.data_start + t->offset,
      t->nbytes, file_};
}

}  // namespace tensorpar
