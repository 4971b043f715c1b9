// `tensorpar chat`: interactive multi-turn chat with the model's chat template. Rank 0 reads
// stdin and broadcasts each turn; the KV cache keeps the conversation, and a turn re-runs only
// the tokens after the longest prefix the cache already holds. When the conversation outgrows
// the context, its oldest turns are dropped (with a notice on stderr). While rank 0 waits for
// input it sends a keep-alive so the other ranks' collectives never reach their timeout.
// --json prints one object per turn instead of the streamed text and prompts.
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/run_model.h"
#include "comm/communicator.h"
#include "infer/generate.h"
#include "model/tokenizer_loader.h"

namespace tensorpar::cli {

namespace {

struct ChatCliOptions {
  CommonOptions common;
  ModelOptions model;
  std::string system;
  GenerateOptions gen;
};

enum Command : int32_t { kKeepAlive = 0, kTurn = 1, kExit = 2 };

// Rank 0: waits for a line on stdin, broadcasting keep-alives; returns nullopt at EOF or /exit.
std::optional<std::string> read_turn(Communicator& tp, double keepalive_s, bool prompt) {
  if (prompt) {
    std::printf("\n> ");
    std::fflush(stdout);
  }
  for (;;) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int ready = poll(&p, 1, int(keepalive_s * 1000));
    if (ready > 0) break;
    int32_t cmd = kKeepAlive;
    tp.broadcast(&cmd, 1, DType::kI32, 0);
  }
  std::string line;
  if (!std::getline(std::cin, line) || line == "/exit" || line == "/quit") return std::nullopt;
  return line;
}

// The conversation's ids as the model sees them (template applied, BOS added once).
std::vector<int32_t> encode_conversation(const Tokenizer& tok, const ChatTemplate& tmpl,
                                         const std::vector<ChatMessage>& messages) {
  std::vector<int32_t> all = tok.encode(tmpl.apply(messages, /*add_generation_prompt=*/true));
  if (tok.add_bos() && tok.bos_id() >= 0 && (all.empty() || all[0] != tok.bos_id()))
    all.insert(all.begin(), tok.bos_id());
  return all;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

void run_chat(const ChatCliOptions& o) {
  run_with_model("chat", o.common, o.model, [&](CausalLM& model) {
    Communicator& tp = model.control();  // every rank of the model: turns are broadcast over it
    const bool leader = tp.rank() == 0;
    const bool json = o.common.json;
    std::optional<Tokenizer> tok;
    std::optional<ChatTemplate> tmpl;
    if (leader) {
      tok = load_tokenizer(tokenizer_source(o.model));
      tmpl = chat_template_or_chatml(o.model, *tok, "chat");
      if (!json)
        std::printf("tensorpar chat: %s at tp %d. Type a message; /exit or Ctrl-D ends.\n",
                    o.model.model.c_str(), tp.size());
    }
    auto cache = model.make_cache(context_length(o.model, model));
    const int64_t reply_room = 16;  // tokens kept free for the start of a reply
    const double keepalive_s = std::max(0.05, CommOptions::from_env().timeout_s / 4);
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    const size_t first_turn = messages.size();  // the system message is never dropped
    std::vector<int32_t> cached;                // rank 0: the ids the cache holds
    int64_t turn = 0;
    for (;;) {
      int32_t cmd = kKeepAlive;
      std::vector<int32_t> ids;
      int64_t keep = 0;
      if (leader) {
        auto line = read_turn(tp, keepalive_s, !json);
        cmd = line ? kTurn : kExit;
        if (line) {
          messages.push_back({"user", *line});
          std::vector<int32_t> all = encode_conversation(*tok, *tmpl, messages);
          size_t dropped = 0;
          while (int64_t(all.size()) + reply_room > cache->capacity() &&
                 messages.size() > first_turn + 1) {
            // The oldest exchange goes: a user turn and the assistant's answer to it.
            const size_t n = messages.size() > first_turn + 2 ? 2 : 1;
            messages.erase(messages.begin() + ptrdiff_t(first_turn),
                           messages.begin() + ptrdiff_t(first_turn + n));
            dropped += n;
            all = encode_conversation(*tok, *tmpl, messages);
          }
          if (dropped > 0)
            std::fprintf(stderr,
                         "[chat] context of %lld tokens full: dropped the %zu oldest messages\n",
                         (long long)cache->capacity(), dropped);
          if (int64_t(all.size()) + reply_room > cache->capacity()) {
            std::fprintf(
                stderr,
                "[chat] this message is %zu tokens with the template, too long for the %lld-token "
                "context (--ctx); it was not sent\n",
                all.size(), (long long)cache->capacity());
            messages.pop_back();
            cmd = kKeepAlive;
          } else {
            keep = int64_t(common_prefix(cached, all));
            if (keep == int64_t(all.size())) --keep;  // at least one new token to run
            ids.assign(all.begin() + keep, all.end());
            cached = all;
          }
        }
      }
      tp.broadcast(&cmd, 1, DType::kI32, 0);
      if (cmd == kKeepAlive) continue;
      if (cmd == kExit) break;
      tp.broadcast(&keep, 1, DType::kI64, 0);
      ids = broadcast_ids(std::move(ids), tp);
      cache->truncate(keep);
      const GenerateResult r =
          generate(model, *cache, ids, o.gen, leader ? &*tok : nullptr, [&](std::string_view s) {
            if (json) return;
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fflush(stdout);
          });
      if (leader) {
        ++turn;
        messages.push_back({"assistant", r.text});
        cached.insert(cached.end(), r.tokens.begin(), r.tokens.end());
        cached.resize(size_t(std::min<int64_t>(int64_t(cached.size()), cache->length())));
        if (json)
          std::cout << nlohmann::json{{"turn", turn},
                                      {"text", r.text},
                                      {"tokens", r.tokens.size()},
                                      {"prompt_tokens", r.prompt_tokens},
                                      {"context_tokens", cache->length()},
                                      {"stop_reason", r.stop_reason}}
                           .dump()
                    << std::endl;
        else
          std::printf("\n");
      }
    }
  });
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatCliOptions>();
  o->gen.max_tokens = 512;
  o->gen.sampling.temperature = 0.7f;
  o->gen.sampling.top_p = 0.9f;
  CLI::App* cmd = app.add_subcommand("chat", "Interactive multi-turn chat (reads stdin)");
  add_model_options(*cmd, o->model);
  add_common_options(*cmd, o->common);
  cmd->add_option("--system", o->system, "System message");
  add_sampling_options(*cmd, o->gen);
  cmd->callback([o, cmd] {
    check_model_paths(o->model, "chat", /*needs_tokenizer=*/true);
    warn_inert_sampling(*cmd, o->gen, "chat");
    run_chat(*o);
  });
}

}  // namespace tensorpar::cli
