// GGUF metadata values and typed access. Integer getters are lenient about the stored integer
// width (converters disagree on u32 vs i32 for ids and counts) but never about range.
#include "io/gguf_metadata.h"

#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace tensorpar {
namespace {

bool is_unsigned(GgufType t) {
  return t == GgufType::kU8 || t == GgufType::kU16 || t == GgufType::kU32 || t == GgufType::kU64;
}
bool is_signed(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}
bool is_float(GgufType t) {
  return t == GgufType::kF32 || t == GgufType::kF64;
}

// Element k of a numeric array as a double-free exact integer (unsigned in u, signed in i).
template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

struct Num {
  bool is_int;
  bool neg;
  uint64_t u;  // magnitude for ints when !neg
  int64_t i;   // value for signed ints
  double f;
};

Num element(const GgufArray& a, int64_t k) {
  const std::byte* p = a.raw.data() + k * gguf_scalar_size(a.elem_type);
  switch (a.elem_type) {
    case GgufType::kU8:
      return {true, false, load<uint8_t>(p), 0, 0};
    case GgufType::kU16:
      return {true, false, load<uint16_t>(p), 0, 0};
    case GgufType::kU32:
      return {true, false, load<uint32_t>(p), 0, 0};
    case GgufType::kU64:
      return {true, false, load<uint64_t>(p), 0, 0};
    case GgufType::kI8: {
      const int64_t v = load<int8_t>(p);
      return {true, v < 0, uint64_t(v), v, 0};
    }
    case GgufType::kI16: {
      const int64_t v = load<int16_t>(p);
      return {true, v < 0, uint64_t(v), v, 0};
    }
    case GgufType::kI32: {
      const int64_t v = load<int32_t>(p);
      return {true, v < 0, uint64_t(v), v, 0};
    }
    case GgufType::kI64: {
      const int64_t v = load<int64_t>(p);
      return {true, v < 0, uint64_t(v), v, 0};
    }
    case GgufType::kF32:
      return {false, false, 0, 0, double(load<float>(p))};
    case GgufType::kF64:
      return {false, false, 0, 0, load<double>(p)};
    case GgufType::kBool:
      return {true, false, load<uint8_t>(p) ? 1u : 0u, 0, 0};
    default:
      return {false, false, 0, 0, 0};
  }
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

int64_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

void GgufMetadata::add(std::string key, GgufValue value) {
  TP_CHECK(!index_.contains(key), "[load_gguf] '", file_, "': duplicate metadata key '", key, "'");
  index_.emplace(key, kv_.size());
  kv_.emplace_back(std::move(key), std::move(value));
}

const GgufValue* GgufMetadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufMetadata::get(std::string_view key, const char* want) const {
  const GgufValue* v = find(key);
  TP_CHECK(v, "[GgufMetadata] key '", key, "' not found in '", file_, "' (wanted ", want, ")");
  return *v;
}

namespace {
template <typename T>
T get_int(const GgufValue& v, std::string_view key, const std::string& file, const char* want) {
  bool ok = false;
  T r{};
  if (is_unsigned(v.type)) {
    ok = v.u <= uint64_t(std::numeric_limits<T>::max());
    r = T(v.u);
  } else if (is_signed(v.type)) {
    ok = v.i >= int64_t(std::numeric_limits<T>::min()) &&
         (v.i < 0 || uint64_t(v.i) <= uint64_t(std::numeric_limits<T>::max()));
    r = T(v.i);
  }
  TP_CHECK(ok, "[GgufMetadata] key '", key, "' in '", file, "': got ", GgufMetadata::describe(v),
           ", expected a ", want);
  return r;
}

template <typename T>
std::vector<T> get_num_array(const GgufValue& v, std::string_view key, const std::string& file,
                             const char* want, bool allow_float) {
  TP_CHECK(v.type == GgufType::kArray && gguf_scalar_size(v.array.elem_type) > 0 &&
               v.array.elem_type != GgufType::kBool &&
               (allow_float || !is_float(v.array.elem_type)),
           "[GgufMetadata] key '", key, "' in '", file, "': got ", GgufMetadata::describe(v),
           ", expected an array of ", want);
  std::vector<T> out(size_t(v.array.count));
  for (int64_t k = 0; k < v.array.count; ++k) {
    const Num n = element(v.array, k);
    if constexpr (std::is_floating_point_v<T>) {
      out[size_t(k)] = n.is_int ? (n.neg ? T(n.i) : T(n.u)) : T(n.f);
    } else {
      const bool fits = n.neg ? n.i >= int64_t(std::numeric_limits<T>::min())
                              : n.u <= uint64_t(std::numeric_limits<T>::max());
      TP_CHECK(fits, "[GgufMetadata] key '", key, "' in '", file, "': element ", k,
               " does not fit in ", want);
      out[size_t(k)] = n.neg ? T(n.i) : T(n.u);
    }
  }
  return out;
}
}  // namespace

uint32_t GgufMetadata::get_u32(std::string_view key) const {
  return get_int<uint32_t>(get(key, "u32"), key, file_, "u32");
}
uint64_t GgufMetadata::get_u64(std::string_view key) const {
  return get_int<uint64_t>(get(key, "u64"), key, file_, "u64");
}
int32_t GgufMetadata::get_i32(std::string_view key) const {
  return get_int<int32_t>(get(key, "i32"), key, file_, "i32");
}
int64_t GgufMetadata::get_i64(std::string_view key) const {
  return get_int<int64_t>(get(key, "i64"), key, file_, "i64");
}

double GgufMetadata::get_f64(std::string_view key) const {
  const GgufValue& v = get(key, "float");
  TP_CHECK(is_float(v.type), "[GgufMetadata] key '", key, "' in '", file_, "': got ", describe(v),
           ", expected f32 or f64");
  return v.f;
}
float GgufMetadata::get_f32(std::string_view key) const {
  return float(get_f64(key));
}

bool GgufMetadata::get_bool(std::string_view key) const {
  const GgufValue& v = get(key, "bool");
  TP_CHECK(v.type == GgufType::kBool, "[GgufMetadata] key '", key, "' in '", file_, "': got ",
           describe(v), ", expected bool");
  return v.u != 0;
}

const std::string& GgufMetadata::get_string(std::string_view key) const {
  const GgufValue& v = get(key, "string");
  TP_CHECK(v.type == GgufType::kString, "[GgufMetadata] key '", key, "' in '", file_, "': got ",
           describe(v), ", expected string");
  return v.str;
}

const std::vector<std::string>& GgufMetadata::get_string_array(std::string_view key) const {
  const GgufValue& v = get(key, "string array");
  TP_CHECK(v.type == GgufType::kArray && v.array.elem_type == GgufType::kString,
           "[GgufMetadata] key '", key, "' in '", file_, "': got ", describe(v),
           ", expected an array of strings");
  return v.array.strings;
}

std::vector<int32_t> GgufMetadata::get_i32_array(std::string_view key) const {
  return get_num_array<int32_t>(get(key, "i32 array"), key, file_, "i32", false);
}
std::vector<int64_t> GgufMetadata::get_i64_array(std::string_view key) const {
  return get_num_array<int64_t>(get(key, "i64 array"), key, file_, "i64", false);
}
std::vector<float> GgufMetadata::get_f32_array(std::string_view key) const {
  return get_num_array<float>(get(key, "f32 array"), key, file_, "f32", true);
}

std::string GgufMetadata::describe(const GgufValue& v) {
  std::ostringstream os;
  switch (v.type) {
    case GgufType::kString: {
      os << "string \"" << v.str.substr(0, 60) << (v.str.size() > 60 ? "...\"" : "\"");
      break;
    }
    case GgufType::kArray: {
      const GgufArray& a = v.array;
      os << "array<" << gguf_type_name(a.elem_type) << ">[" << a.count << "]";
      const int64_t show = std::min<int64_t>(a.count, 4);
      if (show > 0) os << " {";
      for (int64_t k = 0; k < show; ++k) {
        os << (k ? ", " : "");
        if (a.elem_type == GgufType::kString) {
          os << '"' << a.strings[size_t(k)].substr(0, 30) << '"';
        } else if (a.elem_type == GgufType::kArray) {
          os << "array[" << a.arrays[size_t(k)].count << "]";
        } else {
          const Num n = element(a, k);
          if (n.is_int)
            os << (n.neg ? std::to_string(n.i) : std::to_string(n.u));
          else
            os << n.f;
        }
      }
      if (show > 0) os << (a.count > show ? ", ...}" : "}");
      break;
    }
    case GgufType::kBool:
      os << "bool " << (v.u ? "true" : "false");
      break;
    case GgufType::kF32:
    case GgufType::kF64:
      os << gguf_type_name(v.type) << " " << v.f;
      break;
    default:
      os << gguf_type_name(v.type) << " "
         << (is_signed(v.type) ? std::to_string(v.i) : std::to_string(v.u));
  }
  return os.str();
}

}  // namespace tensorpar
