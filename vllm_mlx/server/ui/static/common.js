"use strict";
// Shared by the playground and the status view: the API key and authorized requests.
// The key (for `serve --api-key`) is kept in this browser's localStorage and sent as
// `Authorization: Bearer KEY`; the pages themselves load without it.

const KEY_STORE = "vllm-mlx.api-key";

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  // Text goes in as text nodes only: nothing the model or server sends is parsed as HTML.
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
  }
  return node;
}

const auth = {
  required: document.body.dataset.auth === "required",
  key() { return localStorage.getItem(KEY_STORE) || ""; },
  headers(extra) {
    const headers = Object.assign({}, extra || {});
    const key = this.key();
    if (key) headers.Authorization = "Bearer " + key;
    return headers;
  },
  // Resolves once the dialog closes (the key saved, or Escape); `why` says why it is asked.
  ask(why) {
    const dialog = $("key-dialog");
    $("key-why").textContent = why;
    $("key-input").value = this.key();
    $("key-form").onsubmit = (event) => {
      event.preventDefault();
      localStorage.setItem(KEY_STORE, $("key-input").value.trim());
      dialog.close();
    };
    if (!dialog.open) dialog.showModal();
    return new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  },
  async ready() {
    const button = $("key-button");
    if (this.required) {
      button.hidden = false;
      button.onclick = () => this.ask("Change the API key sent with every request.");
      if (!this.key()) await this.ask("This server was started with --api-key.");
    }
  },
};

class HTTPError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// A request to the server's API with the key; a 401 asks for the key and retries once.
async function api(path, options) {
  const opts = Object.assign({}, options || {});
  for (let attempt = 0; ; attempt++) {
    const response = await fetch(path, Object.assign({}, opts, { headers: auth.headers(opts.headers) }));
    if (response.status === 401 && attempt === 0 && !(opts.signal && opts.signal.aborted)) {
      auth.required = true;
      $("key-button").hidden = false;
      await auth.ask("The server refused the key (" + (await errorMessage(response)) + ").");
      continue;
    }
    if (!response.ok) throw new HTTPError(response.status, await errorMessage(response));
    return response;
  }
}

// The message of an error body in the server's (OpenAI) shape, else the status line.
async function errorMessage(response) {
  try {
    const body = await response.json();
    const error = body.error || {};
    return (typeof error === "string" ? error : error.message) || response.statusText;
  } catch (_) {
    return "HTTP " + response.status;
  }
}
