// The tokenizer and chat template that belong to a model: an HF directory's tokenizer.json
// (+ tokenizer_config.json), or the tokenizer.ggml.* metadata of a GGUF file.
#pragma once

#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {

// path: an HF directory or a .gguf file (as load_model takes), or a tokenizer.json file. Throws
// Error naming the file when it has no usable tokenizer.
// A regular file whose name ends in .gguf.
bool is_gguf_file(const std::string& path);
// A GGUF file's tokenizer.ggml.* metadata with llama.cpp's defaults (SentencePiece vocabularies
// add BOS and a space prefix unless the file says otherwise). Throws Error naming the file.
GgufVocab read_gguf_vocab(const std::string& path);
// The GGUF's tokenizer.chat_template ("" if it has none).
std::string gguf_chat_template(const std::string& path);

Tokenizer load_tokenizer(const std::string& path);
// The model's chat template (detected from its Jinja text); ChatML when the model has none.
ChatTemplate load_chat_template(const std::string& path, const Tokenizer& tokenizer);

}  // namespace tensorpar
