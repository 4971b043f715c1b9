// `tensorpar perplexity`: perplexity of a text or a token-id file, optionally dumping the logits
// (float32 little-endian [tokens, vocab]) for comparison with another engine.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/run_model.h"
#include "core/error.h"
#include "infer/generate.h"
#include "infer/perplexity.h"
#include "model/tokenizer_loader.h"

namespace tensorpar::cli {

namespace {

struct PerplexityCliOptions {
  CommonOptions common;
  ModelOptions model;
  std::string text_file, tokens_file, dump_logits;
};

std::vector<int32_t> read_token_file(const std::string& path) {
  std::ifstream f(path);
  TP_CHECK(f.good(), "[perplexity] cannot open ", path);
  std::vector<int32_t> ids;
  std::string word;
  while (f >> word) {
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    TP_CHECK(end && *end == '\0' && v >= 0 && v <= INT32_MAX, "[perplexity] ", path, ": '", word,
             "' is not a token id");
    ids.push_back(int32_t(v));
  }
  return ids;
}

void run_perplexity(const PerplexityCliOptions& o) {
  TP_CHECK(o.text_file.empty() != o.tokens_file.empty(), "[perplexity] give exactly one of --file and --tokens-file");
  check_model_paths(o.model, "perplexity", /*needs_tokenizer=*/!o.text_file.empty());
  run_with_model("perplexity", o.common, o.model, [&](CausalLM& model) {
    Communicator& tp = model.tp();
    Communicator& control = model.control();
    const bool leader = control.rank() == 0;
    std::vector<int32_t> ids;
    if (leader) {
      if (!o.tokens_file.empty()) {
        ids = read_token_file(o.tokens_file);
      } else {
        std::ifstream f(o.text_file, std::ios::binary);
        TP_CHECK(f.good(), "[perplexity] cannot open ", o.text_file);
        const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        const Tokenizer tok = load_tokenizer(tokenizer_source(o.model));
        ids = tok.encode(text, /*allow_special=*/false);
        if (tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
      }
    }
    ids = broadcast_ids(std::move(ids), control);
    std::ofstream dump;
    if (leader && !o.dump_logits.empty()) {
      dump.open(o.dump_logits, std::ios::binary | std::ios::trunc);
      TP_CHECK(dump.good(), "[perplexity] cannot write ", o.dump_logits);
    }
    const int64_t V = model.config().vocab_size;
    const auto r = perplexity(model, ids, context_length(o.model, model), [&](int64_t, const Tensor& logits) {
      if (o.dump_logits.empty()) return;
      const Tensor full = gather_vocab_shards(logits, model.vocab_range(), V, tp);
      if (leader) dump.write(static_cast<const char*>(full.raw()), std::streamsize(full.nbytes()));
    });
    if (!leader) return;
    if (dump.is_open()) {
      dump.close();
      TP_CHECK(dump.good(), "[perplexity] writing ", o.dump_logits, " failed");
    }
    if (o.common.json) {
      std::cout << nlohmann::json{{"ppl", r.ppl()}, {"tokens", ids.size()}, {"scored", r.scored}}.dump() << std::endl;
    } else {
      std::printf("perplexity %.4f over %lld tokens (%lld scored)\n", r.ppl(), static_cast<long long>(ids.size()),
                  static_cast<long long>(r.scored));
    }
  });
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityCliOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text or token file");
  add_model_options(*cmd, o->model);
  add_common_options(*cmd, o->common);
  cmd->add_option("--file", o->text_file, "Text file");
  cmd->add_option("--tokens-file", o->tokens_file, "Whitespace-separated token ids");
  cmd->add_option("--dump-logits", o->dump_logits, "Write float32 little-endian logits [tokens, vocab]");
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace tensorpar::cli
