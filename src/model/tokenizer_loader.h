// The tokenizer and chat template that belong to a model: an HF directory's tokenizer.json
// (+ tokenizer_config.json), or the tokenizer.ggml.* metadata of a GGUF file.
#pragma once

#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {

// path: an HF directory or a .gguf file (as load_model takes), or a tokenizer.json file. Throws
// Error naming the file when it has no usable tokenizer.
Tokenizer load_tokenizer(const std::string& path);
// The model's chat template (detected from its Jinja text); ChatML when the model has none.
ChatTemplate load_chat_template(const std::string& path, const Tokenizer& tokenizer);

}  // namespace tensorpar
