// Loading the tokenizer fixtures written by tools/make_tokenizer_fixtures.py (reference ids from
// the Python `tokenizers` package) for the tokenizer tests.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "fixtures_dir.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar::testing {

inline std::string tokenizer_fixture_path(const std::string& name) {
  return test::fixtures_dir() + "/tokenizer/" + name;
}

inline nlohmann::json load_tokenizer_fixture(const std::string& name) {
  std::ifstream f(tokenizer_fixture_path(name), std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// SmolLM2's GGUF vocabulary, trimmed to the tokens the cases use; the gaps are filled with unused
// placeholder tokens so ids stay those of the real model.
inline Tokenizer load_smollm2_gguf_fixture() {
  const nlohmann::json j = load_tokenizer_fixture("smollm2_gguf_vocab.json");
  const int n = j["vocab_size"].get<int>();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), int32_t(GgufTokenType::kUnused));
  for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = "<unused_" + std::to_string(i) + ">";
  for (const auto& [id, tok] : j["tokens"].items()) tokens[std::stoul(id)] = tok.get<std::string>();
  for (const auto& [id, ty] : j["token_types"].items()) types[std::stoul(id)] = ty.get<int32_t>();
  GgufVocab v;
  v.tokens = std::move(tokens);
  v.token_types = std::move(types);
  v.merges = j["merges"].get<std::vector<std::string>>();
  v.bos_id = j["bos_id"].get<int32_t>();
  v.eos_id = j["eos_id"].get<int32_t>();
  v.pre = j["pre"].get<std::string>();
  return Tokenizer::from_gguf(v);
}

}  // namespace tensorpar::testing
