"use strict";
// The conversation's elements. Every reply is an <article data-role="assistant"> with parts
// (data-part=reasoning|content|tool-calls|stats|error) that streaming fills in place.

function messageView(message) {
  if (message.role === "tool") {
    return el("article", { class: "msg", "data-role": "tool" },
      el("div", { class: "who" }, "result of " + (message.name || "tool")),
      el("div", { "data-part": "content" }, message.content));
  }
  if (message.role === "user") {
    const parts = Array.isArray(message.content) ? message.content : [];
    const text = parts.length
      ? parts.filter((p) => p.type === "text").map((p) => p.text).join("")
      : message.content;
    const images = parts.filter((p) => p.type === "image_url").map((p) =>
      el("img", { "data-part": "image", alt: "attached image",
        src: String(p.image_url.url).startsWith("data:image/") ? p.image_url.url : "" }));
    return el("article", { class: "msg", "data-role": "user" },
      el("div", { class: "who" }, "you"), ...images,
      el("div", { "data-part": "content" }, text));
  }
  const reasoning = el("details", { "data-part": "reasoning" },
    el("summary", {}, "Reasoning"), el("div", { class: "reasoning-text" }));
  reasoning.hidden = true;
  const view = el("article", { class: "msg", "data-role": "assistant" },
    el("div", { class: "who" }, message.model || "assistant"),
    reasoning,
    el("div", { "data-part": "content" }),
    el("div", { "data-part": "tool-calls" }),
    el("div", { "data-part": "error" }),
    el("div", { "data-part": "stats" }));
  updateAssistant(view, message);
  return view;
}

function part(view, name) { return view.querySelector('[data-part="' + name + '"]'); }

// Bring an assistant view up to date with its message (called on every streamed chunk).
function updateAssistant(view, message) {
  const reasoning = part(view, "reasoning");
  if (message.reasoning) {
    if (reasoning.hidden) {
      reasoning.hidden = false;
      reasoning.open = Boolean(message.streaming);
    }
    reasoning.querySelector(".reasoning-text").textContent = message.reasoning.trimStart();
    if (message.streaming && message.content && !reasoning.dataset.folded) {
      reasoning.open = false; // the answer has begun: fold the thinking away
      reasoning.dataset.folded = "1";
    }
  }
  part(view, "content").textContent = message.content || "";
  const cards = part(view, "tool-calls");
  const calls = [
    ...(message.mcp_calls || []).map((c) => Object.assign({ server: c.server || "mcp" }, c)),
    ...(message.tool_calls || []),
  ];
  calls.forEach((call, i) => {
    const card = cards.children[i] || cards.appendChild(toolCard());
    card.dataset.ranOn = call.server ? "server" : "client";
    card.querySelector(".tool-name").textContent = call.name || "…";
    card.querySelector(".tool-where").textContent =
      call.server ? " ran on the server (" + call.server + ")" : " tool call";
    card.querySelector(".tool-args").textContent = prettyArguments(call.arguments);
    const output = card.querySelector(".tool-output");
    const result = call.error ? "error: " + call.error : call.output;
    output.hidden = result === undefined || result === null;
    output.textContent = result || "";
  });
  part(view, "error").textContent = message.error || "";
  part(view, "stats").textContent = message.stats ? statsText(message.stats) : "";
}

function toolCard() {
  const output = el("pre", { class: "tool-output" });
  output.hidden = true;
  return el("div", { class: "tool-card", "data-part": "tool-call" },
    el("div", { class: "tool-head" }, el("span", { class: "tool-name" }),
      el("span", { class: "tool-where" })),
    el("pre", { class: "tool-args" }),
    output);
}

// Arguments as they stream are partial JSON: shown as they are until they parse.
function prettyArguments(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
}
