// `tensorpar generate`: one prompt in, text out (streamed), at any TP size.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/run_model.h"
#include "infer/generate.h"
#include "model/tokenizer_loader.h"

namespace tensorpar::cli {

namespace {

struct GenerateCliOptions {
  CommonOptions common;
  ModelOptions model;
  std::string prompt, system;
  bool chat = false;
  GenerateOptions gen;
};

void run_generate(const GenerateCliOptions& o) {
  run_with_model(o.common, o.model, [&](CausalLM& model) {
    Communicator& tp = model.tp();
    const bool leader = tp.rank() == 0;
    std::optional<Tokenizer> tok;
    std::vector<int32_t> ids;
    if (leader) {
      tok = load_tokenizer(tokenizer_source(o.model));
      std::string text = o.prompt;
      if (o.chat) {
        std::vector<ChatMessage> msgs;
        if (!o.system.empty()) msgs.push_back({"system", o.system});
        msgs.push_back({"user", o.prompt});
        const ChatTemplate tmpl = load_chat_template(tokenizer_source(o.model), *tok);
        text = tmpl.apply(msgs, /*add_generation_prompt=*/true);
      }
      ids = tok->encode(text);
      if (tok->add_bos() && tok->bos_id() >= 0 && (ids.empty() || ids[0] != tok->bos_id()))
        ids.insert(ids.begin(), tok->bos_id());
    }
    ids = broadcast_ids(std::move(ids), tp);
    auto cache = model.make_cache(context_length(o.model, model));
    const bool stream = leader && !o.common.json;
    const GenerateResult r = generate(model, *cache, ids, o.gen, leader ? &*tok : nullptr, [&](std::string_view s) {
      if (stream) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      }
    });
    const std::vector<double> mem = memory_per_rank_mb(model, *cache);
    if (!leader) return;
    const double prefill_tok_s = r.prefill_s > 0 ? double(r.prompt_tokens) / r.prefill_s : 0;
    const double decode_tok_s = r.decode_s > 0 ? double(r.decode_steps) / r.decode_s : 0;
    if (o.common.json) {
      nlohmann::json j = {{"text", r.text},
                          {"tokens", r.tokens.size()},
                          {"prompt_tokens", r.prompt_tokens},
                          {"stop_reason", r.stop_reason},
                          {"prefill_tok_s", prefill_tok_s},
                          {"decode_tok_s", decode_tok_s},
                          {"ttft_ms", r.ttft_s * 1e3},
                          {"peak_rss_mb_per_rank", mem}};
      std::cout << j.dump() << std::endl;
    } else {
      std::fprintf(stderr, "\n[%zu tokens, %s; prefill %.1f tok/s, decode %.1f tok/s, ttft %.0f ms; memory per rank:",
                   r.tokens.size(), r.stop_reason.c_str(), prefill_tok_s, decode_tok_s, r.ttft_s * 1e3);
      for (double m : mem) std::fprintf(stderr, " %.1f MiB", m);
      std::fprintf(stderr, "]\n");
    }
  });
}

}  // namespace

void add_sampling_options(CLI::App& cmd, GenerateOptions& gen) {
  cmd.add_option("--max-tokens", gen.max_tokens, "Tokens to generate at most")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd.add_option("--temperature", gen.sampling.temperature, "0 = greedy")->check(CLI::Range(0.0f, 100.0f));
  cmd.add_option("--top-k", gen.sampling.top_k, "Keep the k most likely tokens (0 = off)")->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--top-p", gen.sampling.top_p, "Nucleus sampling mass (1 = off)")->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--min-p", gen.sampling.min_p, "Drop tokens below min-p x the top probability")->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--seed", gen.sampling.seed, "Sampling seed");
  cmd.add_option("--stop", gen.stop, "Stop string (repeatable)");
}

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  add_model_options(*cmd, o->model);
  add_common_options(*cmd, o->common);
  cmd->add_option("--prompt", o->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user turn");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  add_sampling_options(*cmd, o->gen);
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace tensorpar::cli
