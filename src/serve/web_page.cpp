// The chat page as a raw string compiled into the binary, so `tensorpar serve` needs no files
// beside it. The conversation lives in the page (the server is stateless); each send posts the
// whole history with stream: true and reads the server-sent events from the response body.
#include "serve/web_page.h"

namespace tensorpar {

namespace {

constexpr std::string_view kPage = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tensorpar chat</title>
<link rel="icon" href="data:,">
<style>
  :root { --bg: #f6f7f9; --fg: #1d2330; --muted: #6b7385; --user: #dbe8ff; --bot: #ffffff; --line: #d9dde5; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg);
         color: var(--fg); display: flex; flex-direction: column; height: 100vh; }
  header { padding: 10px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 12px;
           align-items: center; flex-wrap: wrap; background: #fff; }
  header h1 { font-size: 16px; margin: 0 12px 0 0; }
  header label { color: var(--muted); font-size: 13px; }
  header input { font: inherit; font-size: 13px; padding: 2px 6px; border: 1px solid var(--line); border-radius: 4px; }
  #messages { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80ch; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap; word-wrap: break-word;
         border: 1px solid var(--line); }
  .user { align-self: flex-end; background: var(--user); }
  .assistant { align-self: flex-start; background: var(--bot); }
  .error { align-self: center; color: #a01010; background: #fff0f0; }
  .stats { align-self: flex-start; color: var(--muted); font-size: 12px; margin-top: -6px; }
  footer { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid var(--line); background: #fff; }
  #input { flex: 1; font: inherit; padding: 8px; border: 1px solid var(--line); border-radius: 6px; resize: vertical;
           min-height: 44px; }
  button { font: inherit; padding: 0 18px; border: 0; border-radius: 6px; background: #2f6fea; color: #fff; cursor: pointer; }
  button:disabled { background: #9db6ea; cursor: default; }
  #stop { background: #6b7385; }
</style>
</head>
<body>
<header>
  <h1>tensorpar chat</h1>
  <label>system <input id="system" size="28" placeholder="(model default)"></label>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7" style="width:5em"></label>
  <label>max tokens <input id="max-tokens" type="number" min="1" placeholder="(context)" style="width:7em"></label>
  <label>API key <input id="api-key" type="password" size="12" placeholder="(none)"></label>
  <button id="clear" type="button">New chat</button>
</header>
<div id="messages"></div>
<footer>
  <textarea id="input" rows="2" placeholder="Type a message; Enter sends, Shift+Enter is a new line"></textarea>
  <button id="send" type="button">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</footer>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const turns = [];  // {role, content}: the conversation so far, sent whole each turn
let controller = null;

function add(cls, text) {
  const div = document.createElement("div");
  div.className = cls === "stats" ? "stats" : "msg " + cls;
  div.textContent = text;
  $("messages").appendChild(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

// Server-sent events: events end with a blank line; each "data: " line carries one JSON object,
// and "data: [DONE]" ends the stream. Lines starting with ":" are comments.
function takeEvents(buffer, onData) {
  let end;
  while ((end = buffer.indexOf("\n\n")) >= 0) {
    const event = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    for (const line of event.split("\n")) {
      if (line.startsWith("data: ")) onData(line.slice(6));
    }
  }
  return buffer;
}

async function send() {
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  add("user", text);
  turns.push({role: "user", content: text});
  const answer = add("assistant", "");
  const messages = [];
  if ($("system").value.trim()) messages.push({role: "system", content: $("system").value.trim()});
  messages.push(...turns);
  const body = {messages, stream: true, stream_options: {include_usage: true},
                temperature: Number($("temperature").value)};
  if ($("max-tokens").value) body.max_tokens = Number($("max-tokens").value);
  const headers = {"Content-Type": "application/json"};
  if ($("api-key").value) headers["Authorization"] = "Bearer " + $("api-key").value;
  controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  let tFirst = 0, usage = null, finish = null, failed = null;
  try {
    const res = await fetch("/v1/chat/completions", {method: "POST", headers, body: JSON.stringify(body),
                                                     signal: controller.signal});
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || res.status + " " + res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer = takeEvents(buffer + decoder.decode(value, {stream: true}), (data) => {
        if (data === "[DONE]") return;
        const obj = JSON.parse(data);
        if (obj.error) { failed = obj.error.message; return; }
        if (obj.usage) usage = obj.usage;
        const choice = obj.choices && obj.choices[0];
        if (!choice) return;
        if (choice.delta && choice.delta.content) {
          if (!tFirst) tFirst = performance.now();
          answer.textContent += choice.delta.content;
          $("messages").scrollTop = $("messages").scrollHeight;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      });
    }
  } catch (e) {
    failed = e.name === "AbortError" ? null : String(e.message || e);
    if (e.name === "AbortError") finish = "stopped";
  }
  controller = null;
  setBusy(false);
  if (answer.textContent) turns.push({role: "assistant", content: answer.textContent});
  else turns.pop();  // nothing came back: forget the question, so the next turn is well formed
  if (failed) add("error", failed);
  const t1 = performance.now();
  if (usage) {
    const decode = tFirst && t1 > tFirst ? (usage.completion_tokens - 1) / ((t1 - tFirst) / 1000) : 0;
    add("stats", usage.completion_tokens + " tokens, " + decode.toFixed(1) + " tok/s, first token " +
        Math.round((tFirst || t1) - t0) + " ms" + (finish ? ", " + finish : ""));
  } else if (finish) {
    add("stats", finish);
  }
  $("input").focus();
}

$("send").addEventListener("click", send);
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
});
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  turns.length = 0;
  $("messages").replaceChildren();
});
$("input").focus();
</script>
</body>
</html>
)html";

}  // namespace

std::string_view chat_page_html() {
  return kPage;
}

}  // namespace tensorpar
