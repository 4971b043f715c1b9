// Sharded Hugging Face safetensors checkpoints. The index is trusted only as far as it is
// checked: every shard it names is a plain file name inside the directory, and a tensor the
// index maps to a shard must really be in that shard.
#include "io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_depth.h"

namespace tensorpar {

std::shared_ptr<HfCheckpoint> HfCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::shared_ptr<HfCheckpoint> c(new HfCheckpoint(dir));
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    std::ifstream in(index);
    TP_CHECK(in.good(), "[HfCheckpoint] cannot read '", index.string(), "'");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in, json_depth_limit("[HfCheckpoint] '" + index.string() + "'"));
    } catch (const nlohmann::json::exception& e) {
      TP_CHECK(false, "[HfCheckpoint] '", index.string(), "' is not valid JSON: ", e.what());
    }
    TP_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
             "[HfCheckpoint] '", index.string(), "' has no weight_map object");
    if (j.contains("metadata") && j["metadata"].is_object())
      for (auto it = j["metadata"].begin(); it != j["metadata"].end(); ++it)
        c->index_metadata_[it.key()] =
            it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    std::map<std::string, size_t> file_idx;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      TP_CHECK(it.value().is_string(), "[HfCheckpoint] '", index.string(),
               "': weight_map entry of '", it.key(), "' is not a file name");
      const std::string f = it.value().get<std::string>();
      TP_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
               "[HfCheckpoint] '", index.string(), "': shard name '", f, "' of tensor '", it.key(),
               "' is not a plain file name inside the directory");
      auto [fit, added] = file_idx.emplace(f, c->files_.size());
      if (added) c->files_.push_back((fs::path(dir) / f).string());
      c->weight_map_[it.key()] = fit->second;
    }
    for (const auto& f : c->files_)
      TP_CHECK(fs::is_regular_file(f, ec), "[HfCheckpoint] shard '", f, "' named by '",
               index.string(), "' does not exist");
    c->shards_.resize(c->files_.size());
  } else {
    TP_CHECK(fs::exists(single, ec), "[HfCheckpoint] '", dir,
             "' has neither model.safetensors.index.json nor model.safetensors");
    c->files_.push_back(single.string());
    c->shards_.push_back(SafetensorsFile::open(single.string()));
    for (const auto& e : c->shards_[0]->header().entries) c->weight_map_[e.name] = 0;
  }
  return c;
}

const SafetensorsFile& HfCheckpoint::shard(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!shards_[i]) shards_[i] = SafetensorsFile::open(files_[i]);
  return *shards_[i];
}

int64_t HfCheckpoint::shard_of(std::string_view name) const {
  auto it = weight_map_.find(name);
  return it == weight_map_.end() ? -1 : int64_t(it->second);
}

std::vector<TensorInfo> HfCheckpoint::tensors() const {
  std::vector<TensorInfo> out;
  for (size_t i = 0; i < files_.size(); ++i)
    for (TensorInfo& t : shard(i).tensors())
      if (shard_of(t.name) == int64_t(i)) out.push_back(std::move(t));
  return out;
}

std::optional<TensorInfo> HfCheckpoint::find(std::string_view name) const {
  const int64_t i = shard_of(name);
  if (i < 0) return std::nullopt;
  return shard(size_t(i)).find(name);
}

StoredTensor HfCheckpoint::stored(std::string_view name) const {
  const int64_t i = shard_of(name);
  if (i < 0) {
    std::ostringstream files;
    for (size_t k = 0; k < files_.size(); ++k) files << (k ? ", " : "") << files_[k];
    TP_CHECK(false, "[HfCheckpoint] tensor '", name, "' not found in '", dir_,
             "' (searched: ", files.str(), ")");
  }
  const SafetensorsFile& s = shard(size_t(i));
  TP_CHECK(s.find(name).has_value(), "[HfCheckpoint] tensor '", name,
           "' is mapped by the index to '", files_[size_t(i)],
           "' but that file does not contain it");
  return s.stored(name);
}

}  // namespace tensorpar
