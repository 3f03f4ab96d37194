"use strict";
// The playground: settings -> a /v1/chat/completions request, streamed into the reply's
// view; the conversation and the settings are kept in this browser's localStorage.

const CONVERSATION_STORE = "vllm-mlx.conversation";
const SETTINGS_STORE = "vllm-mlx.settings";
const SETTINGS = ["model", "system", "temperature", "top_p", "top_k", "max_tokens", "seed",
  "thinking", "thinking_budget", "schema", "tools", "mcp"];

let conversation = [];
let controller = null;
let attachments = []; // data URLs of the images the next message carries

function loadJSON(store, fallback) {
  try { return JSON.parse(localStorage.getItem(store)) || fallback; } catch (_) { return fallback; }
}

function saveConversation() {
  const kept = conversation.map((m) => { const { streaming, ...rest } = m; return rest; });
  try {
    localStorage.setItem(CONVERSATION_STORE, JSON.stringify(kept));
  } catch (_) { // images can outgrow the browser's storage: keep the text of the chat
    const texts = kept.map((m) => Array.isArray(m.content)
      ? { ...m, content: m.content.filter((p) => p.type === "text") } : m);
    try { localStorage.setItem(CONVERSATION_STORE, JSON.stringify(texts)); } catch (_) { /* full */ }
  }
}

// Images pasted, dropped or picked: read as data URLs, shown above the message box.
function attachFiles(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    const reader = new FileReader();
    reader.onload = () => { attachments.push(reader.result); renderAttachments(); };
    reader.readAsDataURL(file);
  }
}

function renderAttachments() {
  $("attachments").replaceChildren(...attachments.map((url, i) => {
    const remove = el("button", { type: "button", title: "remove", "aria-label": "remove image" }, "x");
    remove.addEventListener("click", () => { attachments.splice(i, 1); renderAttachments(); });
    return el("div", { class: "attachment", "data-part": "attachment" },
      el("img", { src: url, alt: "attached image" }), remove);
  }));
}

function saveSettings() {
  const values = {};
  for (const id of SETTINGS) values[id] = $(id).type === "checkbox" ? $(id).checked : $(id).value;
  localStorage.setItem(SETTINGS_STORE, JSON.stringify(values));
}

function restoreSettings() {
  const values = loadJSON(SETTINGS_STORE, {});
  for (const id of SETTINGS) {
    if (!(id in values) || id === "model" || id === "mcp") continue; // set once known to exist
    $(id).value = values[id];
  }
  return values;
}

function renderConversation() {
  const box = $("messages");
  box.replaceChildren();
  if (!conversation.length) {
    box.append(el("p", { class: "empty" }, "Ask something. The reply streams here, its reasoning " +
      "and tool calls shown apart from the answer."));
  }
  for (const message of conversation) box.append(messageView(message));
  box.scrollTop = box.scrollHeight;
  offerToolResults();
}

// A JSON field of the settings, parsed; an invalid one is shown beside it and throws.
function jsonField(id, check) {
  const text = $(id).value.trim();
  $(id + "-error").textContent = "";
  if (!text) return null;
  try {
    const value = JSON.parse(text);
    const problem = check(value);
    if (problem) throw new Error(problem);
    return value;
  } catch (error) {
    $(id + "-error").textContent = error.message;
    throw error;
  }
}

function numberField(id, integer) {
  const text = $(id).value.trim();
  if (text === "") return undefined;
  return integer ? parseInt(text, 10) : parseFloat(text);
}

// The request's settings (everything but the messages); throws on an invalid JSON field.
function requestOptions() {
  const body = { model: $("model").value || undefined };
  for (const [id, integer] of [["temperature", false], ["top_p", false], ["top_k", true],
    ["max_tokens", true], ["seed", true]]) {
    const value = numberField(id, integer);
    if (value !== undefined && !Number.isNaN(value)) body[id] = value;
  }
  const thinking = $("thinking").value;
  // reasoning_effort: the server writes it under the switch the chat template reads
  if (thinking === "off") body.reasoning_effort = "none";
  if (thinking === "on") body.reasoning_effort = "high";
  const budget = numberField("thinking_budget", true);
  if (thinking !== "off" && budget !== undefined && !Number.isNaN(budget)) {
    body.thinking_token_budget = budget;
  }
  const schema = jsonField("schema", (v) =>
    v && typeof v === "object" && !Array.isArray(v) ? null : "a JSON schema is an object");
  if (schema) {
    body.response_format = { type: "json_schema", json_schema: { name: "playground", schema } };
  }
  const tools = jsonField("tools", (v) =>
    Array.isArray(v) ? null : "tools are a JSON list of {type: function, function: {...}}");
  if (tools && tools.length) body.tools = tools;
  if ($("mcp").checked) {
    body.mcp = true; // the server runs the calls and answers once, with mcp_calls
  } else {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  return body;
}

function historyMessages() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  for (const m of conversation) {
    if (m.role === "user") {
      messages.push({ role: "user", content: m.content });
    } else if (m.role === "tool") {
      messages.push({ role: "tool", tool_call_id: m.tool_call_id, content: m.content });
    } else if (m.content || (m.tool_calls && m.tool_calls.length)) {
      const out = { role: "assistant", content: m.content || "" };
      if (m.tool_calls && m.tool_calls.length) {
        out.tool_calls = m.tool_calls.map((c) => ({
          id: c.id, type: "function", function: { name: c.name, arguments: c.arguments },
        }));
      }
      messages.push(out);
    }
  }
  return messages;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("clear").disabled = busy;
}

async function send() {
  const text = $("prompt").value.trim();
  if ((!text && !attachments.length) || controller) return;
  let body;
  try { body = requestOptions(); } catch (_) { return; }
  const content = attachments.length
    ? [...attachments.map((url) => ({ type: "image_url", image_url: { url } })),
      { type: "text", text }]
    : text;
  conversation.push({ role: "user", content });
  attachments = [];
  renderAttachments();
  $("prompt").value = "";
  await generate(body);
}

// The client's tool calls of the last reply, answered by the person: each card of a finished
// reply takes a result; once every call has one, the model continues.
function offerToolResults() {
  const last = conversation[conversation.length - 1];
  const view = $("messages").lastElementChild;
  if (!last || last.role !== "assistant" || controller || !view) return;
  const cards = [...view.querySelectorAll('[data-part="tool-call"][data-ran-on="client"]')];
  const results = {};
  cards.forEach((card, i) => {
    const call = last.tool_calls[i];
    if (!call || card.querySelector(".tool-result")) return;
    const input = el("textarea", { rows: "2", placeholder: "result of " + call.name });
    const button = el("button", { type: "button" }, "Send result");
    const form = el("div", { class: "tool-result" }, input, button);
    button.addEventListener("click", async () => {
      if (controller) return;
      const lastOne = Object.keys(results).length + (i in results ? 0 : 1) === cards.length;
      let body = null;
      if (lastOne) {
        try { body = requestOptions(); } catch (_) { return; } // fix the settings, retry
      }
      results[i] = input.value;
      form.replaceChildren(el("pre", { class: "tool-output" }, input.value));
      if (!body) return;
      cards.forEach((_, j) => conversation.push({ role: "tool", name: last.tool_calls[j].name,
        tool_call_id: last.tool_calls[j].id, content: results[j] }));
      await generate(body);
    });
    card.append(form);
  });
}

async function generate(body) {
  body.messages = historyMessages();
  const message = { role: "assistant", model: body.model, reasoning: "", content: "",
    tool_calls: [], streaming: true };
  conversation.push(message);
  renderConversation();
  const view = $("messages").lastElementChild;
  view.dataset.state = "streaming";
  controller = new AbortController();
  setBusy(true);
  const reply = new Reply();
  const show = () => {
    message.reasoning = reply.reasoning;
    message.content = reply.content;
    message.tool_calls = reply.toolCalls.filter(Boolean);
    if (reply.mcpCalls.length) message.mcp_calls = reply.mcpCalls;
    updateAssistant(view, message);
    $("messages").scrollTop = $("messages").scrollHeight;
  };
  let stopped = false;
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (body.stream) {
      for await (const chunk of sseChunks(response)) if (reply.add(chunk)) show();
    } else {
      reply.setWhole(await response.json());
    }
  } catch (error) {
    if (error.name === "AbortError") stopped = true;
    else message.error = error.message;
  }
  message.streaming = false;
  show();
  if (reply.error) message.error = reply.error;
  message.stats = reply.stats(stopped);
  updateAssistant(view, message);
  view.dataset.state = stopped ? "stopped" : message.error ? "error" : "done";
  controller = null;
  setBusy(false);
  saveConversation();
  offerToolResults();
  $("prompt").focus();
}

async function loadModels(wanted) {
  const select = $("model");
  try {
    const models = (await (await api("/v1/models")).json()).data || [];
    select.replaceChildren(...models.map((m) => el("option", { value: m.id }, m.id)));
    if (models.some((m) => m.id === wanted)) select.value = wanted;
  } catch (error) {
    select.replaceChildren(el("option", { value: "" }, "(" + error.message + ")"));
  }
}

async function loadMcpTools(wanted) {
  // /health needs no key and says whether MCP is configured (so no 404 is ever asked for)
  const health = await (await fetch("/health")).json();
  if (!health.mcp) return;
  const tools = (await (await api("/v1/mcp/tools")).json()).data || [];
  $("mcp-note").textContent = tools.length
    ? tools.length + " tool(s) from " + Object.keys(health.mcp).join(", ")
    : "the MCP servers offer no tools";
  $("mcp-tools").replaceChildren(...tools.map((t) =>
    el("li", { "data-part": "mcp-tool" }, el("code", {}, t.function.name),
      " (" + t.server + ")" + (t.function.description ? ": " + t.function.description : ""))));
  $("mcp").disabled = tools.length === 0;
  $("mcp").checked = Boolean(wanted) && tools.length > 0;
}

async function start() {
  const saved = restoreSettings();
  conversation = loadJSON(CONVERSATION_STORE, []);
  for (const m of conversation) delete m.streaming;
  renderConversation();
  $("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("stop").addEventListener("click", () => { if (controller) controller.abort(); });
  $("attach-button").addEventListener("click", () => $("attach").click());
  $("attach").addEventListener("change", () => { attachFiles($("attach").files); $("attach").value = ""; });
  $("prompt").addEventListener("paste", (event) => {
    const files = [...(event.clipboardData ? event.clipboardData.files : [])];
    if (files.some((f) => f.type.startsWith("image/"))) { event.preventDefault(); attachFiles(files); }
  });
  const composer = $("composer");
  composer.addEventListener("dragover", (event) => { event.preventDefault(); composer.classList.add("dropping"); });
  composer.addEventListener("dragleave", () => composer.classList.remove("dropping"));
  composer.addEventListener("drop", (event) => {
    event.preventDefault();
    composer.classList.remove("dropping");
    attachFiles(event.dataTransfer ? event.dataTransfer.files : []);
  });
  $("clear").addEventListener("click", () => {
    conversation = [];
    saveConversation();
    renderConversation();
  });
  $("settings").addEventListener("input", saveSettings);
  $("settings").addEventListener("change", saveSettings);
  $("model").addEventListener("change", saveSettings);
  await auth.ready();
  await loadModels(saved.model);
  try { await loadMcpTools(saved.mcp); } catch (error) { $("mcp-note").textContent = error.message; }
  document.body.dataset.ready = "1";
  $("prompt").focus();
}

start();
