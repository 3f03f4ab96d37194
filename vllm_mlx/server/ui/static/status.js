"use strict";
// The status view: polls /v1/status (the same counters /metrics renders) every two seconds.

const POLL_MS = 2000;
const SPARK_POINTS = 60;
const rates = [];

function percent(ratio) { return ratio === null ? "–" : (ratio * 100).toFixed(1) + " %"; }
function ms(value) {
  if (value === null) return "–";
  return value >= 1000 ? (value / 1000).toFixed(2) + " s" : value.toFixed(1) + " ms";
}

function show(s) {
  $("s-models").textContent = s.models.map((m) => m.id).join(", ");
  const p = s.parsers;
  $("s-parsers").textContent = "context " + s.models[0].max_model_len + " tokens · reasoning parser " +
    (p.reasoning || "none") + " · tool-call parser " + (p.tool_calls || "none") +
    " · structured output " + p.structured_output;
  $("s-rate").textContent = s.last_minute.tokens_per_s.toFixed(1);
  const span = s.last_minute.window_s;
  $("s-window").textContent = "over the last " +
    (span >= 120 ? (span / 60).toFixed(0) + " min" : span.toFixed(0) + " s");
  $("s-running").textContent = s.running;
  $("s-inflight").textContent = s.requests_in_flight + " HTTP request(s) in flight";
  $("s-queue").textContent = s.queue_depth;
  $("s-cache").textContent = percent(s.prefix_cache.token_hit_rate);
  $("s-cache-sub").textContent = s.prefix_cache.hit_tokens + " prompt tokens from the cache; " +
    percent(s.prefix_cache.request_hit_rate) + " of requests";
  $("s-finished").textContent = s.generations_finished;
  $("s-tokens").textContent = s.prompt_tokens + " prompt · " + s.completion_tokens +
    " generated tokens (of finished requests)";
  $("s-latency").textContent = ms(s.ttft_mean_ms) + " · " + ms(s.itl_mean_ms);
  const servers = Object.entries(s.mcp || {});
  $("s-mcp").textContent = servers.length
    ? servers.map(([name, st]) => name + ": " + st.state + ", " + st.tools + " tools" +
      (st.last_error ? " (" + st.last_error + ")" : "")).join(" · ")
    : "none configured";
  rates.push(s.last_minute.tokens_per_s);
  if (rates.length > SPARK_POINTS) rates.shift();
  spark();
}

function spark() {
  const svg = $("s-spark");
  const top = Math.max(1, ...rates);
  const points = rates.map((r, i) =>
    (i * 300 / (SPARK_POINTS - 1)).toFixed(1) + "," + (58 - (r / top) * 56).toFixed(1));
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  svg.replaceChildren(line);
}

async function poll() {
  const updated = $("s-updated");
  try {
    show(await (await api("/v1/status")).json());
    updated.className = "updated";
    updated.textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.ready = "1";
  } catch (error) {
    updated.className = "updated bad";
    updated.textContent = "could not read /v1/status: " + error.message;
  }
  setTimeout(poll, POLL_MS);
}

auth.ready().then(poll);
