// Sharded checkpoint files: per-rank safetensors with placement metadata, the index, crash-safe
// publication of a directory, and slice assembly across pieces written at any TP size.
#include "io/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "io/xxh64.h"

namespace tensorpar {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tensorpar-sharded-checkpoint-v1";
constexpr const char* kShardKey = "shard:";

std::string shape_json(const Shape& s) {
  return nlohmann::json(s).dump();
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  TP_CHECK(fd >= 0, "[checkpoint] cannot open '", path, "' to fsync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  TP_CHECK(rc == 0, "[checkpoint] fsync of '", path, "' failed: ", std::strerror(errno));
}

}  // namespace

std::string checkpoint_shard_file(int rank, int n_ranks) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank-%05d-of-%05d.safetensors", rank, n_ranks);
  return buf;
}

void write_checkpoint_shard(const std::string& path, const std::vector<ShardedTensor>& tensors) {
  std::vector<NamedTensor> named;
  std::map<std::string, std::string> meta;
  meta["format"] = kFormat;
  for (const ShardedTensor& t : tensors) {
    const Shape& g = t.global_shape;
    const int nd = int(g.size());
    TP_CHECK(t.shard_dim >= -1 && t.shard_dim < nd, "[write_checkpoint_shard] tensor '", t.name,
             "': shard_dim ", t.shard_dim, " for global shape ", shape_json(g), " in '", path, "'");
    Shape expect = g;
    if (t.shard_dim >= 0) {
      TP_CHECK(t.begin >= 0 && t.begin <= t.end && t.end <= g[size_t(t.shard_dim)],
               "[write_checkpoint_shard] tensor '", t.name, "': range [", t.begin, ", ", t.end,
               ") outside global shape ", shape_json(g));
      expect[size_t(t.shard_dim)] = t.end - t.begin;
    }
    TP_CHECK(t.tensor.shape() == expect, "[write_checkpoint_shard] tensor '", t.name, "': got ",
             t.tensor.describe(), ", expected shape ", shape_json(expect), " (global ",
             shape_json(g), ", shard_dim ", t.shard_dim, ")");
    nlohmann::json m = {
        {"global_shape", g}, {"shard_dim", t.shard_dim}, {"begin", t.begin}, {"end", t.end}};
    if (t.shard_dim < 0) m["begin"] = 0, m["end"] = nd ? g[0] : 0;
    meta[std::string(kShardKey) + t.name] = m.dump();
    named.push_back({t.name, t.tensor});
  }
  save_safetensors(path, named, meta);
}

void write_checkpoint_index(const std::string& dir, int n_files, const nlohmann::json& state) {
  nlohmann::json index;
  index["format"] = kFormat;
  index["n_files"] = n_files;
  index["files"] = nlohmann::json::array();
  index["file_bytes"] = nlohmann::json::array();
  index["file_xxh64"] = nlohmann::json::array();
  nlohmann::json tensors = nlohmann::json::object();
  for (int r = 0; r < n_files; ++r) {
    const std::string file = checkpoint_shard_file(r, n_files);
    index["files"].push_back(file);
    {  // what resume checks each file against (ShardedCheckpointReader)
      const std::shared_ptr<MappedFile> bytes = MappedFile::open(dir + "/" + file);
      index["file_bytes"].push_back(bytes->size());
      index["file_xxh64"].push_back(xxh64_hex(xxh64(bytes->bytes())));
    }
    std::shared_ptr<SafetensorsFile> f = SafetensorsFile::open(dir + "/" + file);
    for (const auto& [key, value] : f->metadata()) {
      if (key.rfind(kShardKey, 0) != 0) continue;
      const std::string name = key.substr(std::strlen(kShardKey));
      const nlohmann::json m = nlohmann::json::parse(value);
      nlohmann::json& t = tensors[name];
      if (t.is_null()) {
        t["global_shape"] = m.at("global_shape");
        t["shard_dim"] = m.at("shard_dim");
        t["pieces"] = nlohmann::json::array();
      }
      TP_CHECK(t["global_shape"] == m.at("global_shape"), "[write_checkpoint_index] tensor '", name,
               "': global shape ", m.at("global_shape").dump(), " in ", file, ", expected ",
               t["global_shape"].dump());
      t["pieces"].push_back({{"file", r},
                             {"shard_dim", m.at("shard_dim")},
                             {"begin", m.at("begin")},
                             {"end", m.at("end")}});
    }
  }
  index["tensors"] = std::move(tensors);
  index["state"] = state;
  const std::string text = index.dump(1);
  write_file_atomic(dir + "/index.json", std::as_bytes(std::span(text.data(), text.size())));
}

void publish_checkpoint_dir(const std::string& tmp_dir, const std::string& root,
                            const std::string& name) {
  fsync_path(tmp_dir, true);
  const fs::path dst = fs::path(root) / name;
  std::error_code ec;
  if (fs::exists(dst)) {
    // An older checkpoint of the same name (e.g. a re-run): move it aside first so that the
    // rename below is a plain rename; `latest` may point at it until the new one is in place.
    const fs::path old = fs::path(root) / (".old-" + name);
    fs::remove_all(old, ec);
    fs::rename(dst, old, ec);
    TP_CHECK(!ec, "[publish_checkpoint_dir] cannot move aside '", dst.string(),
             "': ", ec.message());
  }
  fs::rename(tmp_dir, dst, ec);
  TP_CHECK(!ec, "[publish_checkpoint_dir] renaming '", tmp_dir, "' to '", dst.string(),
           "': ", ec.message());
  fsync_path(root, true);
  const std::string pointer = name + "\n";
  write_file_atomic(root + "/latest", std::as_bytes(std::span(pointer.data(), pointer.size())));
  fs::remove_all(fs::path(root) / (".old-" + name), ec);
}

namespace {

using nlohmann::json;

// A value for an error message, shortened.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// An integer in [lo, hi] (unsigned values above INT64_MAX are outside every range).
bool int_in(const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return false;
  const int64_t x = v.get<int64_t>();
  return x >= lo && x <= hi;
}

const json& member(const json& obj, const char* key, const std::string& what) {
  const auto it = obj.find(key);
  TP_CHECK(it != obj.end(), what, ": no \"", key, "\"");
  return *it;
}

bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

bool hex16(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

void check_tensor(const json& t, const std::string& what, int64_t n_files) {
  TP_CHECK(t.is_object(), what, ": got ", brief(t), ", expected an object");
  const json& g = member(t, "global_shape", what);
  TP_CHECK(g.is_array(), what, ": global_shape ", brief(g), ", expected an array of dims");
  int64_t bytes = 4;  // as f32, what the reader assembles
  for (const json& d : g) {
    TP_CHECK(int_in(d, 0, std::numeric_limits<int64_t>::max()), what, ": global_shape ", brief(g),
             ", expected dims >= 0");
    TP_CHECK(!__builtin_mul_overflow(bytes, d.get<int64_t>(), &bytes), what, ": global_shape ",
             brief(g), " has more bytes than int64 counts");
  }
  const int64_t nd = int64_t(g.size());
  const json& sd = member(t, "shard_dim", what);
  TP_CHECK(int_in(sd, -1, nd - 1), what, ": shard_dim ", brief(sd), ", expected -1 or a dim of ",
           brief(g));
  const json& pieces = member(t, "pieces", what);
  TP_CHECK(pieces.is_array(), what, ": pieces ", brief(pieces), ", expected an array");
  for (size_t i = 0; i < pieces.size(); ++i) {
    const json& p = pieces[i];
    const std::string pw = what + " piece " + std::to_string(i);
    TP_CHECK(p.is_object(), pw, ": got ", brief(p), ", expected an object");
    const json& f = member(p, "file", pw);
    TP_CHECK(int_in(f, 0, n_files - 1), pw, ": file ", brief(f), ", expected an index into the ",
             n_files, " files");
    const json& psd = member(p, "shard_dim", pw);
    TP_CHECK(int_in(psd, -1, nd - 1), pw, ": shard_dim ", brief(psd), ", expected -1 or a dim of ",
             brief(g));
    const json& b = member(p, "begin", pw);
    const json& e = member(p, "end", pw);
    // A replicated piece's range is not used; a sharded one's lies inside its dim.
    const bool sharded = psd.get<int64_t>() >= 0;
    const int64_t extent =
        sharded ? g[psd.get<size_t>()].get<int64_t>() : std::numeric_limits<int64_t>::max();
    TP_CHECK(int_in(b, 0, extent) && int_in(e, 0, extent) && b.get<int64_t>() <= e.get<int64_t>(),
             pw, ": [begin, end) = [", brief(b), ", ", brief(e), ")",
             sharded ? " along shard_dim " + std::to_string(psd.get<int64_t>()) : std::string(),
             ", expected integers 0 <= begin <= end",
             sharded ? " <= " + std::to_string(extent) + " (global shape " + brief(g) + ")"
                     : std::string());
  }
}

}  // namespace

nlohmann::json parse_checkpoint_index(std::string_view text, const std::string& where) {
  const std::string w = "[ShardedCheckpointReader] '" + where + "'";
  json index;
  try {
    index = json::parse(text, json_depth_limit(w));
  } catch (const json::exception& e) {
    TP_CHECK(false, w, " is not valid JSON: ", e.what());
  }
  TP_CHECK(index.is_object(), w, ": got ", brief(index), ", expected a JSON object");
  const auto fmt = index.find("format");
  TP_CHECK(fmt != index.end() && fmt->is_string() && *fmt == kFormat, w, ": format ",
           fmt == index.end() ? std::string("missing") : brief(*fmt), ", expected '", kFormat, "'");
  TP_CHECK(index.contains("tensors") && index.contains("files") && index.contains("state"), w,
           " lacks tensors/files/state");
  const json& files = index["files"];
  TP_CHECK(files.is_array(), w, ": files ", brief(files), ", expected an array of file names");
  for (const json& f : files)
    TP_CHECK(f.is_string() && plain_file_name(f.get<std::string>()), w, ": files entry ", brief(f),
             ", expected a file name inside the checkpoint directory");
  const int64_t n_files = int64_t(files.size());
  if (index.contains("n_files"))
    TP_CHECK(int_in(index["n_files"], n_files, n_files), w, ": n_files ", brief(index["n_files"]),
             ", but files lists ", n_files);
  const bool has_bytes = index.contains("file_bytes"), has_hash = index.contains("file_xxh64");
  TP_CHECK(has_bytes == has_hash, w, ": file_bytes and file_xxh64 come together, got only ",
           has_bytes ? "file_bytes" : "file_xxh64");
  if (has_bytes) {
    const json& bytes = index["file_bytes"];
    const json& hash = index["file_xxh64"];
    TP_CHECK(bytes.is_array() && int64_t(bytes.size()) == n_files && hash.is_array() &&
                 int64_t(hash.size()) == n_files,
             w, ": file_bytes ", brief(bytes), " and file_xxh64 ", brief(hash), ", expected ",
             n_files, " of each (one per file)");
    for (const json& b : bytes)
      TP_CHECK(int_in(b, 0, std::numeric_limits<int64_t>::max()), w, ": file_bytes entry ",
               brief(b), ", expected a size >= 0");
    for (const json& h : hash)
      TP_CHECK(h.is_string() && hex16(h.get<std::string>()), w, ": file_xxh64 entry ", brief(h),
               ", expected 16 hex digits");
  }
  const json& tensors = index["tensors"];
  TP_CHECK(tensors.is_object(), w, ": tensors ", brief(tensors), ", expected an object");
  for (const auto& [name, t] : tensors.items()) check_tensor(t, w + " tensor '" + name + "'", n_files);
  TP_CHECK(index["state"].is_object(), w, ": state ", brief(index["state"]), ", expected an object");
  return index;
}

std::vector<SlicePart> plan_checkpoint_slice(const nlohmann::json& index, const std::string& name,
                                             int dim, int64_t begin, int64_t end,
                                             const std::string& where) {
  const json& tensors = index.at("tensors");
  const auto it = tensors.find(name);
  TP_CHECK(it != tensors.end(), "[ShardedCheckpointReader] no tensor '", name, "' in ", where);
  const Shape g = (*it)["global_shape"].get<Shape>();
  TP_CHECK(!g.empty() && dim >= 0 && dim < int(g.size()) && begin >= 0 && begin <= end &&
               end <= g[size_t(dim)],
           "[ShardedCheckpointReader] tensor '", name, "' ", shape_json(g), ": slice [", begin,
           ", ", end, ") along dim ", dim, " is outside it");
  const json& pieces = (*it)["pieces"];
  TP_CHECK(!pieces.empty(), "[ShardedCheckpointReader] tensor '", name, "' has no pieces in ",
           where);
  // A replicated piece holds everything.
  for (const json& p : pieces)
    if (p["shard_dim"].get<int>() < 0)
      return {SlicePart{p["file"].get<int64_t>(), begin, end, 0, end - begin, -1, -1, -1}};
  // Sharded pieces (all along one dim sd): each piece's overlap; then check they cover it.
  std::vector<SlicePart> parts;
  std::vector<std::pair<int64_t, int64_t>> covered;  // along sd, in global coordinates
  int sd = -1;
  for (const json& p : pieces) {
    const int psd = p["shard_dim"].get<int>();
    TP_CHECK(sd < 0 || psd == sd, "[ShardedCheckpointReader] tensor '", name,
             "' is split along dims ", sd, " and ", psd, " in ", where);
    sd = psd;
    const int64_t pb = p["begin"].get<int64_t>(), pe = p["end"].get<int64_t>();
    if (pe <= pb) continue;
    int64_t lo = begin, hi = end;  // along dim, global
    if (sd == dim) lo = std::max(begin, pb), hi = std::min(end, pe);
    if (hi <= lo) continue;
    const int64_t off = sd == dim ? pb : 0;
    parts.push_back({p["file"].get<int64_t>(), lo - off, hi - off, lo - begin, hi - begin,
                     sd == dim ? -1 : sd, sd == dim ? -1 : pb, sd == dim ? -1 : pe});
    covered.push_back(sd == dim ? std::make_pair(lo, hi) : std::make_pair(pb, pe));
  }
  const int64_t want_lo = sd == dim ? begin : 0, want_hi = sd == dim ? end : g[size_t(sd)];
  std::sort(covered.begin(), covered.end());
  int64_t reach = want_lo;
  for (const auto& [a, b] : covered) {
    if (a > reach) break;
    reach = std::max(reach, b);
  }
  TP_CHECK(reach >= want_hi || (want_hi == want_lo), "[ShardedCheckpointReader] tensor '", name,
           "': the pieces in ", where, " cover only up to ", reach, " of [", want_lo, ", ", want_hi,
           ") along dim ", sd);
  return parts;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::exists(fs::path(path) / "index.json")) return path;
  const fs::path latest = fs::path(path) / "latest";
  TP_CHECK(fs::exists(latest), "[resolve_checkpoint_dir] '", path,
           "' is not a checkpoint: it has neither index.json nor a 'latest' pointer");
  std::ifstream f(latest);
  std::string name;
  std::getline(f, name);
  TP_CHECK(!name.empty() && name.find('/') == std::string::npos, "[resolve_checkpoint_dir] '",
           latest.string(), "' holds '", name, "', expected a checkpoint directory name");
  const std::string dir = (fs::path(path) / name).string();
  TP_CHECK(fs::exists(fs::path(dir) / "index.json"), "[resolve_checkpoint_dir] '", latest.string(),
           "' names '", dir, "', which has no index.json");
  return dir;
}

ShardedCheckpointReader::ShardedCheckpointReader(const std::string& path)
    : dir_(resolve_checkpoint_dir(path)) {
  const std::string file = dir_ + "/index.json";
  std::ifstream f(file, std::ios::binary);
  TP_CHECK(f.good(), "[ShardedCheckpointReader] cannot open '", file, "'");
  std::ostringstream text;
  text << f.rdbuf();
  index_ = parse_checkpoint_index(text.str(), file);
  files_.resize(index_["files"].size());
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

SafetensorsFile& ShardedCheckpointReader::file(int64_t i) const {
  TP_CHECK(i >= 0 && i < int64_t(files_.size()), "[ShardedCheckpointReader] file index ", i, " of ",
           files_.size(), " in ", dir_);
  if (!files_[size_t(i)]) {
    const std::string name = index_["files"][size_t(i)].get<std::string>();
    const std::string path = dir_ + "/" + name;
    TP_CHECK(fs::exists(path), "[ShardedCheckpointReader] checkpoint ", dir_, " is missing its shard file ",
             name, " (listed in its index.json): it cannot be loaded; resume from an earlier step-N "
             "directory of its root");
    verify_file(i, path);
    files_[size_t(i)] = SafetensorsFile::open(path);
  }
  return *files_[size_t(i)];
}

void ShardedCheckpointReader::verify_file(int64_t i, const std::string& path) const {
  // Checkpoints written before the index recorded sizes and digests are read unchecked.
  if (!index_.contains("file_bytes") || !index_.contains("file_xxh64")) return;
  const int64_t want_bytes = index_["file_bytes"].at(size_t(i)).get<int64_t>();
  const std::string want_hash = index_["file_xxh64"].at(size_t(i)).get<std::string>();
  const std::shared_ptr<MappedFile> f = MappedFile::open(path);
  TP_CHECK(f->size() == want_bytes, "[ShardedCheckpointReader] shard ", path, " is ", f->size(),
           " bytes but index.json recorded ", want_bytes,
           " (truncated or overwritten): this checkpoint cannot be loaded; resume from an earlier "
           "step-N directory of its root");
  const std::string got = xxh64_hex(xxh64(f->bytes()));
  TP_CHECK(got == want_hash, "[ShardedCheckpointReader] shard ", path,
           " is corrupt: its xxh64 is ", got, " but index.json recorded ", want_hash,
           ": this checkpoint cannot be loaded; resume from an earlier step-N directory of its root");
}

std::vector<std::string> ShardedCheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_["tensors"].items()) out.push_back(k);
  return out;
}

Shape ShardedCheckpointReader::global_shape(const std::string& name) const {
  TP_CHECK(has(name), "[ShardedCheckpointReader] no tensor '", name, "' in ", dir_);
  return index_["tensors"][name]["global_shape"].get<Shape>();
}

Tensor ShardedCheckpointReader::read_full(const std::string& name) const {
  const Shape g = global_shape(name);
  return read_slice(name, 0, 0, g.empty() ? 1 : g[0]);
}

Tensor ShardedCheckpointReader::read_slice(const std::string& name, int dim, int64_t begin,
                                           int64_t end) const {
  const std::vector<SlicePart> parts = plan_checkpoint_slice(index_, name, dim, begin, end, dir_);
  Shape out_shape = global_shape(name);
  out_shape[size_t(dim)] = end - begin;
  Tensor out = Tensor::empty(out_shape, DType::kF32);
  for (const SlicePart& p : parts) {
    Tensor piece = file(p.file).read_slice(name, dim, p.src_begin, p.src_end, DType::kF32);
    Tensor dst = out.slice(dim, p.dst_begin, p.dst_end);
    if (p.shard_dim >= 0) dst = dst.slice(p.shard_dim, p.shard_begin, p.shard_end);
    dst.copy_from(piece);
  }
  return out;
}

}  // namespace tensorpar
