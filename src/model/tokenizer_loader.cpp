// Glue between model files and the tokenizer: which file holds the vocabulary, and where the
// chat template lives (tokenizer_config.json for HF, tokenizer.chat_template for GGUF).
#include "model/tokenizer_loader.h"

#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"

namespace tensorpar {

namespace {

bool is_gguf(const std::string& path) {
  return std::filesystem::is_regular_file(path) && path.size() >= 5 &&
         path.compare(path.size() - 5, 5, ".gguf") == 0;
}

}  // namespace

Tokenizer load_tokenizer(const std::string& path) {
  if (is_gguf(path)) {
    auto file = GgufFile::open(path);
    const GgufMetadata& md = file->metadata();
    TP_CHECK(md.has("tokenizer.ggml.tokens"), "[load_tokenizer] ", path,
             ": no tokenizer.ggml.tokens in the GGUF metadata");
    const std::string model = md.get_string_or("tokenizer.ggml.model", "gpt2");
    TP_CHECK(model == "gpt2", "[load_tokenizer] ", path, ": tokenizer.ggml.model '", model,
             "' is not supported (only byte-level BPE, 'gpt2')");
    const std::vector<std::string> none;
    const auto& merges = md.has("tokenizer.ggml.merges") ? md.get_string_array("tokenizer.ggml.merges") : none;
    const std::vector<int32_t> types =
        md.has("tokenizer.ggml.token_type") ? md.get_i32_array("tokenizer.ggml.token_type") : std::vector<int32_t>{};
    const int32_t bos = md.has("tokenizer.ggml.bos_token_id") ? int32_t(md.get_u32("tokenizer.ggml.bos_token_id")) : -1;
    const int32_t eos = md.has("tokenizer.ggml.eos_token_id") ? int32_t(md.get_u32("tokenizer.ggml.eos_token_id")) : -1;
    return Tokenizer::from_gguf_vocab(md.get_string_array("tokenizer.ggml.tokens"), merges, types, bos, eos,
                                      md.get_string_or("tokenizer.ggml.pre", "default"),
                                      md.get_bool_or("tokenizer.ggml.add_bos_token", false));
  }
  if (std::filesystem::is_regular_file(path) && path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    return Tokenizer::from_json_file(path);  // a tokenizer.json itself
  const std::filesystem::path json = std::filesystem::path(path) / "tokenizer.json";
  TP_CHECK(std::filesystem::is_regular_file(json), "[load_tokenizer] ", path,
           ": no tokenizer.json in the model directory (and not a .gguf or .json file)");
  return Tokenizer::from_json_file(json.string());
}

ChatTemplate load_chat_template(const std::string& path, const Tokenizer& tokenizer) {
  std::string jinja = tokenizer.chat_template();
  if (jinja.empty() && is_gguf(path)) {
    jinja = GgufFile::open(path)->metadata().get_string_or("tokenizer.chat_template", "");
  }
  if (jinja.empty()) return ChatTemplate::chatml();
  return ChatTemplate::detect(jinja);
}

}  // namespace tensorpar
