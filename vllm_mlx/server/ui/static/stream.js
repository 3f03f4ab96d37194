"use strict";
// Reading a /v1/chat/completions stream: SSE frames to chunk objects, and chunks folded
// into one reply (reasoning, answer, tool calls by index, usage).

async function* sseChunks(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue; // keep-alive comments
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

class Reply {
  constructor() {
    this.reasoning = "";
    this.content = "";
    this.toolCalls = []; // {id, name, arguments}
    this.mcpCalls = []; // server-run calls: {server, name, arguments, output, error}
    this.usage = null;
    this.finishReason = null;
    this.error = null;
    this.tokens = 0; // chunks that carried output: one per generated token
    this.started = performance.now();
    this.firstAt = null;
    this.lastAt = null;
  }

  // Fold one stream chunk in; returns true if it changed what is shown.
  add(chunk) {
    if (chunk.error) {
      this.error = chunk.error.message || String(chunk.error);
    }
    if (chunk.usage) this.usage = chunk.usage;
    const choice = (chunk.choices || [])[0];
    if (!choice) return Boolean(chunk.error || chunk.usage);
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    const delta = choice.delta || {};
    let output = false;
    if (delta.reasoning_content) { this.reasoning += delta.reasoning_content; output = true; }
    if (delta.content) { this.content += delta.content; output = true; }
    for (const call of delta.tool_calls || []) {
      const entry = this.toolCalls[call.index] ||
        (this.toolCalls[call.index] = { id: "", name: "", arguments: "" });
      if (call.id) entry.id = call.id;
      const fn = call.function || {};
      if (fn.name) entry.name += fn.name;
      if (fn.arguments) entry.arguments += fn.arguments;
      output = true;
    }
    if (output) {
      const now = performance.now();
      if (this.firstAt === null) this.firstAt = now;
      this.lastAt = now;
      this.tokens += 1;
    }
    return output || Boolean(choice.finish_reason || chunk.error);
  }

  // A whole (non-streamed) completion, as the MCP tool loop answers.
  setWhole(body) {
    const choice = body.choices[0];
    const message = choice.message || {};
    this.reasoning = message.reasoning_content || "";
    this.content = message.content || "";
    this.toolCalls = (message.tool_calls || []).map((c) => ({
      id: c.id, name: c.function.name, arguments: c.function.arguments,
    }));
    this.mcpCalls = body.mcp_calls || [];
    this.usage = body.usage || null;
    this.finishReason = choice.finish_reason;
    this.firstAt = this.lastAt = performance.now();
  }

  // Token counts and speed for the line under the reply.
  stats(stopped) {
    const s = {};
    if (this.usage) {
      s.prompt = this.usage.prompt_tokens;
      s.completion = this.usage.completion_tokens;
      const details = this.usage.completion_tokens_details || {};
      if (details.reasoning_tokens) s.reasoning = details.reasoning_tokens;
      const cached = (this.usage.prompt_tokens_details || {}).cached_tokens;
      if (cached) s.cached = cached;
    } else if (this.tokens) {
      s.completion = this.tokens;
      s.estimated = true;
    }
    if (this.firstAt !== null) s.ttft = (this.firstAt - this.started) / 1000;
    const tokens = s.completion || 0;
    if (this.mcpCalls.length && tokens) {
      s.tokPerS = tokens / ((this.lastAt - this.started) / 1000);
      s.wholeRequest = true;
    } else if (tokens > 1 && this.lastAt > this.firstAt) {
      s.tokPerS = (tokens - 1) / ((this.lastAt - this.firstAt) / 1000);
    }
    if (this.finishReason) s.finish = this.finishReason;
    if (stopped) s.stopped = true;
    return s;
  }
}

function statsText(s) {
  const parts = [];
  if (s.prompt !== undefined) parts.push(s.prompt + " prompt" + (s.cached ? " (" + s.cached + " cached)" : ""));
  if (s.completion !== undefined) {
    parts.push((s.estimated ? "~" : "") + s.completion + " completion" +
      (s.reasoning ? " (" + s.reasoning + " reasoning)" : "") + " tokens");
  }
  if (s.tokPerS !== undefined) parts.push(s.tokPerS.toFixed(1) + " tok/s" + (s.wholeRequest ? " (whole request)" : ""));
  if (s.ttft !== undefined && !s.wholeRequest) parts.push("first token " + s.ttft.toFixed(2) + " s");
  if (s.finish) parts.push(s.finish);
  if (s.stopped) parts.push("stopped");
  return parts.join(" · ");
}
