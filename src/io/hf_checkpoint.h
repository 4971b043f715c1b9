// A Hugging Face checkpoint directory: model.safetensors.index.json's weight_map names the shard
// of each tensor (opened lazily, on first use), or a single model.safetensors.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/tensor_store.h"

namespace tensorpar {

class HfCheckpoint final : public TensorStore {
 public:
  // `dir` holds model.safetensors.index.json (sharded) or model.safetensors. Shards named by
  // the index must exist and stay inside `dir`. Throws Error naming the files.
  static std::shared_ptr<HfCheckpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The shard files, in index order.
  const std::vector<std::string>& files() const { return files_; }
  // Index metadata ("metadata" object of the index, e.g. total_size), as JSON text per key.
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }

  std::vector<TensorInfo> tensors() const override;  // opens every shard
  std::optional<TensorInfo> find(std::string_view name) const override;
  StoredTensor stored(std::string_view name) const override;

 private:
  explicit HfCheckpoint(std::string dir) : dir_(std::move(dir)) {}
  const SafetensorsFile& shard(size_t i) const;  // opens on first use; thread-safe
  // Index of the shard holding `name`, or -1.
  int64_t shard_of(std::string_view name) const;

  std::string dir_;
  std::vector<std::string> files_;                         // full paths
  std::map<std::string, size_t, std::less<>> weight_map_;  // tensor -> files_ index
  std::map<std::string, std::string> index_metadata_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<SafetensorsFile>> shards_;
};

}  // namespace tensorpar
