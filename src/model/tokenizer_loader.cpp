// Glue between model files and the tokenizer: which file holds the vocabulary, and where the
// chat template lives (tokenizer_config.json for HF, tokenizer.chat_template for GGUF).
#include "model/tokenizer_loader.h"

#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"

namespace tensorpar {

bool is_gguf_file(const std::string& path) {
  return std::filesystem::is_regular_file(path) && path.size() >= 5 &&
         path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::string gguf_chat_template(const std::string& path) {
  return GgufFile::open(path)->metadata().get_string_or("tokenizer.chat_template", "");
}

GgufVocab read_gguf_vocab(const std::string& path) {
  auto file = GgufFile::open(path);
  const GgufMetadata& md = file->metadata();
  TP_CHECK(md.has("tokenizer.ggml.tokens"), "[load_tokenizer] ", path,
           ": no tokenizer.ggml.tokens in the GGUF metadata");
  GgufVocab v;
  v.model = md.get_string_or("tokenizer.ggml.model", "gpt2");
  v.pre = md.get_string_or("tokenizer.ggml.pre", "default");
  v.tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (md.has("tokenizer.ggml.merges")) v.merges = md.get_string_array("tokenizer.ggml.merges");
  if (md.has("tokenizer.ggml.scores")) v.scores = md.get_f32_array("tokenizer.ggml.scores");
  if (md.has("tokenizer.ggml.token_type"))
    v.token_types = md.get_i32_array("tokenizer.ggml.token_type");
  auto id_or = [&](const char* key) { return md.has(key) ? int32_t(md.get_u32(key)) : -1; };
  v.bos_id = id_or("tokenizer.ggml.bos_token_id");
  v.eos_id = id_or("tokenizer.ggml.eos_token_id");
  v.unk_id = id_or("tokenizer.ggml.unknown_token_id");
  // llama.cpp's defaults: SentencePiece vocabularies add BOS and a space prefix unless told not
  // to.
  const bool spm = v.model == "llama";
  v.add_bos = md.get_bool_or("tokenizer.ggml.add_bos_token", spm);
  v.add_space_prefix = md.get_bool_or("tokenizer.ggml.add_space_prefix", spm);
  return v;
}

Tokenizer load_tokenizer(const std::string& path) {
  if (is_gguf_file(path)) {
    const GgufVocab v = read_gguf_vocab(path);
    try {
      return Tokenizer::from_gguf(v);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (file '" + path + "')");
    }
  }
  if (std::filesystem::is_regular_file(path) && path.size() >= 5 &&
      path.compare(path.size() - 5, 5, ".json") == 0)
    return Tokenizer::from_json_file(path);  // a tokenizer.json itself
  const std::filesystem::path json = std::filesystem::path(path) / "tokenizer.json";
  TP_CHECK(std::filesystem::is_regular_file(json), "[load_tokenizer] ", path,
           ": no tokenizer.json in the model directory (and not a .gguf or .json file)");
  return Tokenizer::from_json_file(json.string());
}

ChatTemplate load_chat_template(const std::string& path, const Tokenizer& tokenizer) {
  std::string jinja = tokenizer.chat_template();
  if (jinja.empty() && is_gguf_file(path)) {
    jinja = gguf_chat_template(path);
  }
  if (jinja.empty()) {
    // No template in the files (e.g. Gemma 3 GGUFs): the family its special tokens announce.
    if (tokenizer.token_id("<start_of_turn>") >= 0) return ChatTemplate::gemma();
    if (tokenizer.token_id("<|start_header_id|>") >= 0) return ChatTemplate::llama3();
    return ChatTemplate::chatml();
  }
  return ChatTemplate::detect(jinja);
}

}  // namespace tensorpar
