// `tensorpar generate`: one prompt in (text, a file, or stdin), text out (streamed), at any TP
// size. --json prints one object instead of the streamed text.
#include "infer/generate.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/run_model.h"
#include "core/error.h"
#include "model/tokenizer_loader.h"

namespace tensorpar::cli {

namespace {

struct GenerateCliOptions {
  CommonOptions common;
  ModelOptions model;
  std::string prompt, prompt_file, system;
  bool chat = false;
  GenerateOptions gen;
};

// The prompt: --prompt TEXT, --prompt - (stdin) or --prompt-file FILE.
std::string read_prompt(const GenerateCliOptions& o) {
  TP_CHECK(o.prompt.empty() != o.prompt_file.empty(),
           "[generate] give the prompt with exactly one of --prompt TEXT (- = stdin) and "
           "--prompt-file FILE");
  if (!o.prompt.empty() && o.prompt != "-") return o.prompt;
  std::ifstream file;
  if (!o.prompt_file.empty()) {
    file.open(o.prompt_file, std::ios::binary);
    TP_CHECK(file.good(), "[generate] --prompt-file ", o.prompt_file, ": cannot open");
  }
  std::istream& in = o.prompt_file.empty() ? std::cin : file;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!text.empty() && text.back() == '\n')
    text.pop_back();  // the newline that ends a file or `echo`
  TP_CHECK(!text.empty(), "[generate] the prompt from ",
           o.prompt_file.empty() ? "stdin" : o.prompt_file, " is empty");
  return text;
}

void run_generate(const GenerateCliOptions& o, const std::string& prompt) {
  run_with_model("generate", o.common, o.model, [&](CausalLM& model) {
    Communicator& control = model.control();
    const bool leader = control.rank() == 0;
    std::optional<Tokenizer> tok;
    std::vector<int32_t> ids;
    if (leader) {
      tok = load_tokenizer(tokenizer_source(o.model));
      std::string text = prompt;
      if (o.chat) {
        std::vector<ChatMessage> msgs;
        if (!o.system.empty()) msgs.push_back({"system", o.system});
        msgs.push_back({"user", prompt});
        text = chat_template_or_chatml(o.model, *tok, "generate")
                   .apply(msgs, /*add_generation_prompt=*/true);
      }
      ids = tok->encode(text);
      if (tok->add_bos() && tok->bos_id() >= 0 && (ids.empty() || ids[0] != tok->bos_id()))
        ids.insert(ids.begin(), tok->bos_id());
    }
    ids = broadcast_ids(std::move(ids), control);
    auto cache = model.make_cache(context_length(o.model, model));
    const bool stream = leader && !o.common.json;
    const GenerateResult r =
        generate(model, *cache, ids, o.gen, leader ? &*tok : nullptr, [&](std::string_view s) {
          if (stream) {
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fflush(stdout);
          }
        });
    const std::vector<double> mem = weights_kv_mb_per_rank(model, *cache);
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
                          {"weights_kv_mb_per_rank", mem},
                          {"process_peak_rss_mb", process_peak_rss_mb()}};
      std::cout << j.dump() << std::endl;
    } else {
      std::fprintf(stderr,
                   "\n[%zu tokens, %s; prefill %.1f tok/s, decode %.1f tok/s, ttft %.0f ms; "
                   "weights+KV per rank:",
                   r.tokens.size(), r.stop_reason.c_str(), prefill_tok_s, decode_tok_s,
                   r.ttft_s * 1e3);
      for (double m : mem) std::fprintf(stderr, " %.1f MiB", m);
      std::fprintf(stderr, "]\n");
    }
  });
}

}  // namespace

void add_sampling_options(CLI::App& cmd, GenerateOptions& gen) {
  cmd.add_option("-n,--max-tokens", gen.max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd.add_option("--temperature", gen.sampling.temperature,
                 "0 = greedy (then top-k/p, min-p and seed do nothing)")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd.add_option("--top-k", gen.sampling.top_k, "Keep the k most likely tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--top-p", gen.sampling.top_p, "Nucleus sampling mass (1 = off)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--min-p", gen.sampling.min_p,
                 "Drop tokens below min-p x the top probability (0 = off)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--seed", gen.sampling.seed, "Sampling seed");
  // Penalties act on greedy decoding too (they change the logits the argmax sees).
  cmd.add_option("--repeat-penalty", gen.sampling.repetition_penalty,
                 "Repetition penalty over the prompt and generated tokens: a seen token's logit "
                 "is divided by it if positive, multiplied if negative (1 = off)")
      ->check(CLI::Range(0.01f, 10.0f));
  cmd.add_option("--frequency-penalty", gen.sampling.frequency_penalty,
                 "Subtract this x the times a token was generated (OpenAI; 0 = off)")
      ->check(CLI::Range(-2.0f, 2.0f));
  cmd.add_option("--presence-penalty", gen.sampling.presence_penalty,
                 "Subtract this once from every token already generated (OpenAI; 0 = off)")
      ->check(CLI::Range(-2.0f, 2.0f));
  cmd.add_option("--stop", gen.stop, "Stop string (repeatable)");
}

void warn_inert_sampling(const CLI::App& cmd, const GenerateOptions& gen, const char* command) {
  if (gen.sampling.temperature > 0) return;
  std::string inert;
  for (const char* flag : {"--top-k", "--top-p", "--min-p", "--seed"})
    if (cmd.count(flag) > 0) inert += (inert.empty() ? "" : ", ") + std::string(flag);
  if (!inert.empty())
    std::fprintf(stderr,
                 "[%s] warning: %s %s nothing at --temperature 0 (greedy decoding); pass "
                 "--temperature > 0 to sample\n",
                 command, inert.c_str(), inert.find(',') == std::string::npos ? "does" : "do");
}

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  add_model_options(*cmd, o->model);
  add_common_options(*cmd, o->common);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (- = read stdin)");
  cmd->add_option("--prompt-file", o->prompt_file, "Read the prompt from this file");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user turn");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  add_sampling_options(*cmd, o->gen);
  cmd->callback([o, cmd] {
    check_model_paths(o->model, "generate", /*needs_tokenizer=*/true);
    const std::string prompt = read_prompt(*o);
    warn_inert_sampling(*cmd, o->gen, "generate");
    if (!o->system.empty() && !o->chat)
      std::fprintf(stderr, "[generate] warning: --system does nothing without --chat\n");
    run_generate(*o, prompt);
  });
}

}  // namespace tensorpar::cli
