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
#include <sstream>

#include "core/error.h"
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
  std::ifstream f(file);
  TP_CHECK(f.good(), "[ShardedCheckpointReader] cannot open '", file, "'");
  try {
    index_ = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    TP_CHECK(false, "[ShardedCheckpointReader] '", file, "' is not valid JSON: ", e.what());
  }
  TP_CHECK(index_.value("format", "") == kFormat, "[ShardedCheckpointReader] '", file,
           "': format '", index_.value("format", ""), "', expected '", kFormat, "'");
  TP_CHECK(index_.contains("tensors") && index_.contains("files") && index_.contains("state"),
           "[ShardedCheckpointReader] '", file, "' lacks tensors/files/state");
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
  const Shape g = global_shape(name);
  TP_CHECK(!g.empty() && dim >= 0 && dim < int(g.size()) && begin >= 0 && begin <= end &&
               end <= g[size_t(dim)],
           "[ShardedCheckpointReader] tensor '", name, "' ", shape_json(g), ": slice [", begin,
           ", ", end, ") along dim ", dim, " is outside it");
  Shape out_shape = g;
  out_shape[size_t(dim)] = end - begin;
  Tensor out = Tensor::empty(out_shape, DType::kF32);
  const nlohmann::json& pieces = index_["tensors"][name]["pieces"];
  TP_CHECK(!pieces.empty(), "[ShardedCheckpointReader] tensor '", name, "' has no pieces in ",
           dir_);
  // A replicated piece holds everything.
  for (const nlohmann::json& p : pieces)
    if (p["shard_dim"].get<int>() < 0) {
      out.copy_from(file(p["file"].get<int64_t>()).read_slice(name, dim, begin, end, DType::kF32));
      return out;
    }
  // Sharded pieces (all along one dim sd): copy each piece's overlap; then check they covered it.
  std::vector<std::pair<int64_t, int64_t>> covered;  // along sd, in global coordinates
  int sd = -1;
  for (const nlohmann::json& p : pieces) {
    const int psd = p["shard_dim"].get<int>();
    TP_CHECK(sd < 0 || psd == sd, "[ShardedCheckpointReader] tensor '", name,
             "' is split along dims ", sd, " and ", psd, " in ", dir_);
    sd = psd;
    const int64_t pb = p["begin"].get<int64_t>(), pe = p["end"].get<int64_t>();
    if (pe <= pb) continue;
    int64_t lo = begin, hi = end;  // along dim, global
    if (sd == dim) lo = std::max(begin, pb), hi = std::min(end, pe);
    if (hi <= lo) continue;
    const int64_t off = sd == dim ? pb : 0;
    Tensor piece =
        file(p["file"].get<int64_t>()).read_slice(name, dim, lo - off, hi - off, DType::kF32);
    Tensor dst = out.slice(dim, lo - begin, hi - begin);
    if (sd != dim) dst = dst.slice(sd, pb, pe);
    dst.copy_from(piece);
    covered.push_back(sd == dim ? std::make_pair(lo, hi) : std::make_pair(pb, pe));
  }
  const int64_t want_lo = sd == dim ? begin : 0,
                want_hi = sd == dim ? end : (sd >= 0 ? g[size_t(sd)] : 0);
  std::sort(covered.begin(), covered.end());
  int64_t reach = want_lo;
  for (const auto& [a, b] : covered) {
    if (a > reach) break;
    reach = std::max(reach, b);
  }
  TP_CHECK(reach >= want_hi || (want_hi == want_lo), "[ShardedCheckpointReader] tensor '", name,
           "': the pieces in ", dir_, " cover only up to ", reach, " of [", want_lo, ", ", want_hi,
           ") along dim ", sd);
  return out;
}

}  // namespace tensorpar
