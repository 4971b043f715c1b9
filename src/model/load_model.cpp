// load_model / init_model (see load_model.h).
#include "model/load_model.h"

#include <filesystem>

#include "core/buffer_cache.h"
#include "core/error.h"
#include "io/gguf.h"
#include "model/shard_plan.h"
#include "model/staged_model.h"
#include "model/transformer.h"

namespace tensorpar {

namespace {

bool is_gguf(const std::string& path) { return !std::filesystem::is_directory(path); }

std::shared_ptr<TensorStore> open_store(const std::string& path, ModelConfig* config) {
  TP_CHECK(std::filesystem::exists(path), "[load_model] ", path, ": no such file or directory");
  if (is_gguf(path)) {
    auto g = GgufFile::open(path);
    if (config) {
      std::vector<std::string> names;
      for (const TensorInfo& t : g->tensors()) names.push_back(t.name);
      *config = ModelConfig::from_gguf(g->metadata(), names, path);
    }
    return g;
  }
  if (config) *config = ModelConfig::from_hf_file((std::filesystem::path(path) / "config.json").string());
  return open_tensor_store(path);
}

}  // namespace

ModelConfig read_model_config(const std::string& path) {
  TP_CHECK(std::filesystem::exists(path), "[read_model_config] ", path, ": no such file or directory");
  if (is_gguf(path)) {
    ModelConfig c;
    open_store(path, &c);
    return c;
  }
  return ModelConfig::from_hf_file((std::filesystem::path(path) / "config.json").string());
}

namespace {

// Stage `stage` of `stages` (split_layers; one stage: the whole model), read from the file.
std::unique_ptr<Transformer> load_transformer(const std::string& path, Communicator& tp, const LoadOptions& opt,
                                              ExpertParallel experts, int stages, int stage,
                                              std::span<const int64_t> layer_counts = {}) {
  ModelConfig config;
  auto store = open_store(path, &config);
  const LayerSpan span = split_layers(config.n_layers, stages, layer_counts)[size_t(stage)];
  auto model = std::make_unique<Transformer>(config, tp, ffn_alignment(config, store->tensors()), span, experts);
  // Loading's temporaries (slices read, converted and dropped) are unmapped, not kept for reuse.
  const BufferCacheBypass bypass;
  model->load_weights(WeightSource(std::move(store), path, opt));
  return model;
}

}  // namespace

std::unique_ptr<CausalLM> load_model(const std::string& path, Communicator& tp, const LoadOptions& opt,
                                     ExpertParallel experts) {
  return load_transformer(path, tp, opt, experts, 1, 0);
}

std::unique_ptr<CausalLM> load_pipeline_stage(const std::string& path, Communicator& tp, Communicator& pp,
                                              Communicator& control, const LoadOptions& opt,
                                              std::span<const int64_t> layer_counts, int64_t micro_batch_rows) {
  return std::make_unique<StagedModel>(
      load_transformer(path, tp, opt, {}, pp.size(), pp.rank(), layer_counts), pp, control,
      micro_batch_rows);
}

std::unique_ptr<CausalLM> init_model(const ModelConfig& config, Communicator& tp, uint64_t seed,
                                     ExpertParallel experts) {
  auto model = std::make_unique<Transformer>(config, tp, 32, LayerSpan{}, experts);
  model->init_weights(seed);
  return model;
}

}  // namespace tensorpar
