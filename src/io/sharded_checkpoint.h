// Sharded training checkpoints on disk: one safetensors file per rank holding its slices, each
// tensor's global shape and [begin, end) along its shard dim in the file's metadata, an
// index.json over the files, and crash-safe publication (a temp directory renamed into place,
// then an atomically replaced `latest` pointer). Reading assembles any slice of a tensor from
// whichever files hold overlapping pieces, so a checkpoint reloads at another TP size.
// This layer does no communication; src/train/checkpoint.* orchestrates the ranks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace tensorpar {

class SafetensorsFile;

// One rank's piece of a global tensor: elements [begin, end) along shard_dim (-1: the whole
// tensor, replicated).
struct ShardedTensor {
  std::string name;
  Tensor tensor;  // f32 (or any safetensors dtype), the local piece
  Shape global_shape;
  int shard_dim = -1;
  int64_t begin = 0, end = 0;
};

// "rank-00001-of-00004.safetensors"
std::string checkpoint_shard_file(int rank, int n_ranks);

// Writes one rank's file (atomically) with each tensor's placement in __metadata__ under
// "shard:<name>". Throws Error naming the tensor when a piece does not fit its global shape.
void write_checkpoint_shard(const std::string& path, const std::vector<ShardedTensor>& tensors);

// Rank 0, after every rank's file is written: reads their headers and writes index.json
// ({"format", "n_files", "files", "tensors": {name: {"global_shape", "shard_dim", "pieces"}},
// "state": state, "file_bytes", "file_xxh64": each file's size and XXH64) into dir, atomically.
void write_checkpoint_index(const std::string& dir, int n_files, const nlohmann::json& state);

// Publishes tmp_dir (whose files are already fsync'd) as root/<name>: fsyncs tmp_dir, renames it
// (replacing an older root/<name>), fsyncs root, then atomically points root/latest at name.
// A crash at any point leaves root/latest naming a whole checkpoint.
void publish_checkpoint_dir(const std::string& tmp_dir, const std::string& root,
                            const std::string& name);

// index.json's text parsed and checked as the reader relies on it: "format" this format's;
// "files" plain file names (no '/', not "." or ".."), as many as "n_files" says when present;
// "file_bytes" and "file_xxh64" (both or neither) one size >= 0 and one 16-hex-digit XXH64 per
// file; "tensors" {name: {"global_shape": dims >= 0 whose f32 bytes fit int64, "shard_dim": -1 or
// a dim, "pieces": [{"file": an index into files, "shard_dim": -1 or a dim, "begin" <= "end"
// inside that dim (unchecked for -1)}]}}; "state" an object. Throws Error naming `where` and the
// field. Unknown keys are ignored.
nlohmann::json parse_checkpoint_index(std::string_view text, const std::string& where);

// How ShardedCheckpointReader::read_slice assembles elements [begin, end) along `dim` of a
// tensor, from a checked index: per piece that overlaps, the range along dim to read from its
// file's tensor and where it goes in the result (along dim, and along the piece's shard dim
// when that is another one). A replicated piece, when there is one, is the only part.
struct SlicePart {
  int64_t file = 0;
  int64_t src_begin = 0, src_end = 0;  // along dim, in the piece's own coordinates
  int64_t dst_begin = 0, dst_end = 0;  // along dim, in the result
  int shard_dim = -1;                  // a dim other than `dim`: the piece fills only
  int64_t shard_begin = 0, shard_end = 0;  // [shard_begin, shard_end) of it; else -1
};
// Throws Error naming the tensor and `where` when the tensor is absent, the request is outside
// it, it has no pieces, its pieces are split along two dims, or they do not cover the request.
std::vector<SlicePart> plan_checkpoint_slice(const nlohmann::json& index, const std::string& name,
                                             int dim, int64_t begin, int64_t end,
                                             const std::string& where);

// The checkpoint directory a path names: a directory with index.json, or a root whose `latest`
// names one. Throws Error when neither.
std::string resolve_checkpoint_dir(const std::string& path);

// A checkpoint opened for reading (files mapped on first use).
class ShardedCheckpointReader {
 public:
  explicit ShardedCheckpointReader(const std::string& path);  // path as resolve_checkpoint_dir
  ~ShardedCheckpointReader();

  const std::string& dir() const { return dir_; }
  const nlohmann::json& state() const { return index_.at("state"); }
  bool has(const std::string& name) const { return index_.at("tensors").contains(name); }
  std::vector<std::string> names() const;
  Shape global_shape(const std::string& name) const;

  // Elements [begin, end) along dim of the global tensor, as f32, assembled from every piece
  // that overlaps. Throws Error naming the tensor when the pieces do not cover the request, and
  // naming the file when a shard it needs is missing or differs from the size and XXH64 the
  // index recorded (each file is checked once, when first opened).
  Tensor read_slice(const std::string& name, int dim, int64_t begin, int64_t end) const;
  Tensor read_full(const std::string& name) const;

 private:
  SafetensorsFile& file(int64_t i) const;
  void verify_file(int64_t i, const std::string& path) const;
  std::string dir_;
  nlohmann::json index_;
  mutable std::vector<std::shared_ptr<SafetensorsFile>> files_;
};

}  // namespace tensorpar
