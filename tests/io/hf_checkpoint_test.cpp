// Sharded Hugging Face checkpoints: the index's weight_map routes each tensor to its shard,
// shards open lazily, and a missing tensor or shard is an Error naming the files.
#include "io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>

#include "io/safetensors_writer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_error;
using testing::Rng;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(HfCheckpoint, ShardedIndexFindsEveryTensor) {
  TP_SEED_TRACE();
  Rng rng(3);
  const std::string dir = testing::temp_dir();
  Tensor a = rng.uniform_tensor({9, 7}, DType::kBF16), b = rng.uniform_tensor({33}),
         c = rng.uniform_tensor({4, 3}, DType::kF16);
  save_safetensors(dir + "/model-00001-of-00002.safetensors", {{"a", a}, {"b", b}});
  save_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", c}});
  write_text(
      dir + "/model.safetensors.index.json",
      R"({"metadata": {"total_size": 1234}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  auto store = open_tensor_store(dir);
  auto* ck = dynamic_cast<HfCheckpoint*>(store.get());
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->files().size(), 2u);
  EXPECT_EQ(ck->index_metadata().at("total_size"), "1234");
  EXPECT_EQ(store->tensors().size(), 3u);
  EXPECT_EQ(store->read_slice("a", 0, 3, 6, DType::kF32).to_vector(),
            a.slice(0, 3, 6).to(DType::kF32).to_vector());
  EXPECT_EQ(store->read("c").to_vector(), c.to_vector());
  EXPECT_EQ(store->find("b")->file, dir + "/model-00001-of-00002.safetensors");
  expect_error([&] { store->read("lm_head.weight"); },
               {"lm_head.weight", "not found", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"});
}

TEST(HfCheckpoint, SingleFileAndBadIndexes) {
  Rng rng(4);
  const std::string dir = testing::temp_dir();
  Tensor w = rng.uniform_tensor({5, 6});
  save_safetensors(dir + "/model.safetensors", {{"w", w}});
  auto ck = HfCheckpoint::open(dir);
  EXPECT_EQ(ck->read("w").to_vector(), w.to_vector());
  expect_error([&] { ck->read("x"); }, {"'x'", "model.safetensors"});

  const std::string empty = dir + "/none";
  std::filesystem::create_directories(empty);
  expect_error([&] { HfCheckpoint::open(empty); }, {"none", "model.safetensors.index.json"});

  write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"w": "gone.safetensors"}})");
  expect_error([&] { HfCheckpoint::open(dir); }, {"gone.safetensors", "does not exist"});
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"w": "../model.safetensors"}})");
  expect_error([&] { HfCheckpoint::open(dir); }, {"../model.safetensors", "plain file name"});
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"v": "model.safetensors"}})");
  expect_error([&] { HfCheckpoint::open(dir)->read("v"); }, {"'v'", "does not contain"});
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map": [1]})");
  expect_error([&] { HfCheckpoint::open(dir); }, {"weight_map"});
  write_text(dir + "/model.safetensors.index.json", "{");
  expect_error([&] { HfCheckpoint::open(dir); }, {"not valid JSON"});
  write_text(dir + "/model.safetensors.index.json",
             "{\"metadata\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_error([&] { HfCheckpoint::open(dir); }, {"model.safetensors.index.json", "nested deeper than 128"});
}

}  // namespace
}  // namespace tensorpar
