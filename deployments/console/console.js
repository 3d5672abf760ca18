// The Ragline console: plain JavaScript over the same keyed HTTP API every client uses (no library, no CDN).
// Ask: /v1/chat/completions streamed (SSE) from a collection the key may read (/v1/collections; the collection is
// the model, "ragline/<name>"), citations opened through /v1/chunks/{id}?collection=<name>.
// Operate: /readyz (what is served) and /v1/status (runs, versions, models, evaluations), read-only.
// Every text from the server goes into the page as text (textContent), never as HTML.
"use strict";

const KEY = "ragline.apiKey"; // sessionStorage: this tab only, never in a URL
const $ = (id) => document.getElementById(id);
const thread = []; // chat history as the API takes it: {role, content}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

// ---- errors, in words ------------------------------------------------------------------------------------------

const STATUS_OF = { invalid_request: 422, not_found: 404, overloaded: 503, not_ready: 503, unavailable: 503,
  timeout: 504 }; // app/errors.py's kinds

class ApiError extends Error {
  constructor(status, type, message, retryAfter) {
    super(message);
    this.status = status;
    this.type = type;
    this.retryAfter = retryAfter;
  }
}

function inWords(err) {
  if (!(err instanceof ApiError)) return `Cannot reach Ragline at ${location.origin}: ${err.message}`;
  const retry = err.retryAfter ? ` Try again in ${err.retryAfter} s.` : " Try again shortly.";
  switch (err.status) {
    case 401: return "The API key was refused. Enter a key this endpoint accepts (Change API key).";
    case 404: return `Not found: ${err.message}`;
    case 413: return `The request is too large: ${err.message}`;
    case 422: return `The request was not accepted: ${err.message}`;
    case 429: return `This API key has too many requests waiting for their turn.${retry}`;
    case 503: return err.type === "overloaded"
      ? `Ragline is at capacity right now.${retry}` : `Ragline is not ready: ${err.message}.${retry}`;
    case 504: return "The answer took too long and was cancelled. Ask again, or ask for fewer passages.";
    default: return `Ragline failed to answer (${err.status} ${err.type}). The server log has the details.`;
  }
}

async function failure(response) {
  let type = "http_error", message = response.statusText;
  try {
    const body = await response.json();
    ({ type, message } = body.error || { type, message });
  } catch (_) { /* not JSON: a proxy's page; the status says enough */ }
  return new ApiError(response.status, type, message, response.headers.get("Retry-After"));
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY)}`, "Content-Type": "application/json" },
  });
  if (!response.ok) {
    const err = await failure(response);
    if (err.status === 401) askForKey(inWords(err));
    throw err;
  }
  return response;
}

// ---- the key ---------------------------------------------------------------------------------------------------

function askForKey(message = "") {
  $("key-view").hidden = false;
  $("key-error").textContent = message;
  $("forget-key").hidden = true;
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
  $("key-input").focus();
}

async function useKey(event) {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("key-input").value.trim());
  try {
    await api("/readyz").catch((err) => { if (err.status !== 503) throw err; }); // not ready yet is still a key
  } catch (err) {
    sessionStorage.removeItem(KEY);
    $("key-error").textContent = inWords(err);
    return;
  }
  $("key-input").value = "";
  $("key-view").hidden = true;
  $("forget-key").hidden = false;
  show("ask");
  await loadCollections();
}

// The collections this key may read, the default first when it may; asking and citations use the one chosen.
async function loadCollections() {
  const { data } = await (await api("/v1/collections")).json();
  const chosen = $("collection").value;
  $("collection").replaceChildren(...data.map((c) =>
    el("option", { value: c.name, text: `${c.name} (${c.chunks} chunks)` })));
  if (data.some((c) => c.name === chosen)) $("collection").value = chosen;
}

const collection = () => $("collection").value || "default";

// ---- views -----------------------------------------------------------------------------------------------------

function show(view) {
  for (const tab of document.querySelectorAll(".tab")) tab.setAttribute("aria-selected", tab.dataset.view === view);
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== view;
  if (!sessionStorage.getItem(KEY)) return askForKey();
  if (view === "operate") refresh();
  else $("question").focus();
}

// ---- Ask -------------------------------------------------------------------------------------------------------

async function* sse(response) {
  // Server-sent events: yields {event, data} per blank-line-terminated block
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      yield { event, data };
    }
  }
}

function renderAnswer(node, text, citations) {
  // the answer as text, each [n] a link to the n-th citation's passage
  node.replaceChildren();
  const byN = new Map((citations || []).map((c) => [c.n, c]));
  let last = 0;
  for (const m of text.matchAll(/\[(\d+)\]/g)) {
    const cite = byN.get(Number(m[1]));
    if (!cite) continue;
    node.append(text.slice(last, m.index),
      el("a", { class: "cite", "data-n": m[1], title: cite.title || cite.doc_id, onclick: () => openPassage(cite) },
        m[0]));
    last = m.index + m[0].length;
  }
  node.append(text.slice(last));
}

function renderCitations(list, citations) {
  list.replaceChildren(...citations.map((c) => el("li", { class: c.cited ? "cited" : "", "data-n": c.n,
    "data-chunk": c.chunk_id },
    el("a", { onclick: () => openPassage(c), text: `[${c.n}] ${c.title || c.doc_id}` }),
    ` — ${c.source}${c.location ? ` ${c.location}` : ""} · score ${Number(c.score).toFixed(3)}`)));
}

function renderMeta(node, meta, usage) {
  const t = meta.timings_ms || {};
  const stage = (name) => (name in t ? `${name} ${Math.round(t[name])} ms` : null);
  node.textContent = [
    `index v${meta.index_version} (${meta.mode})`,
    `generator ${meta.models.generator}`, `reranker ${meta.models.reranker}`, `embedder ${meta.models.embedder}`,
    ["retrieve", "rerank", "generate"].map(stage).filter(Boolean).join(", "),
    usage ? `${usage.completion_tokens} tokens` : null,
  ].filter(Boolean).join(" · ");
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  $("ask-error").textContent = "";
  const turn = el("article", { class: "turn" }, el("div", { class: "question", text: question }));
  const answer = el("div", { class: "answer streaming", "data-testid": "answer" });
  const citations = el("ol", { class: "citations" });
  const meta = el("div", { class: "meta" });
  turn.append(answer, citations, meta);
  $("thread").append(turn);
  $("ask-button").disabled = true;

  const sources = $("sources").value.split(",").map((s) => s.trim()).filter(Boolean);
  const body = {
    model: `ragline/${collection()}`, messages: [...thread, { role: "user", content: question }], stream: true,
    top_k: Number($("top-k").value) || 5, ...($("mode").value ? { mode: $("mode").value } : {}),
    ...(sources.length ? { sources } : {}), stream_options: { include_usage: true },
  };
  let text = "", cited = [], about = null;
  try {
    const response = await api("/v1/chat/completions", { method: "POST", body: JSON.stringify(body) });
    for await (const { event, data } of sse(response)) {
      if (event === "error") { // after the response started, an error comes as an event
        const e = JSON.parse(data).error;
        throw new ApiError(STATUS_OF[e.type] || 500, e.type, e.message);
      }
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      for (const choice of chunk.choices) {
        if (choice.delta.content) {
          text += choice.delta.content;
          answer.textContent = text;
        }
      }
      if (chunk.citations) { // the last content chunk: citations and the versions and timings of the answer
        cited = chunk.citations.map((c) => ({ ...c, collection: chunk.ragline.collection }));
        about = chunk.ragline;
        renderCitations(citations, cited);
        renderMeta(meta, about);
      }
      if (chunk.usage && about) renderMeta(meta, about, chunk.usage);
    }
    renderAnswer(answer, text, cited);
    thread.push({ role: "user", content: question }, { role: "assistant", content: text });
    $("question").value = "";
  } catch (err) {
    $("ask-error").textContent = inWords(err);
    if (!text) turn.remove();
  } finally {
    answer.classList.remove("streaming");
    $("ask-button").disabled = false;
  }
}

// The PDF page a passage starts on, rendered by the server with the passage highlighted, beside the text view.
async function showPage(source, page) {
  const response = await api(`/v1/chunks/${encodeURIComponent(source.chunk_id)}/pages/${page}` +
    `?collection=${encodeURIComponent(source.collection)}`);
  const image = $("passage-page-image");
  if (image.src) URL.revokeObjectURL(image.src);
  image.src = URL.createObjectURL(await response.blob());
  image.alt = `${source.source} page ${page}, the passage highlighted`;
  const last = source.pages[source.pages.length - 1];
  $("passage-page-caption").textContent = `page ${page} of ${source.source.split("/").pop()}` +
    (last > page ? ` (the passage goes on to p. ${last})` : "");
  $("passage-page").hidden = false;
  $("passage").classList.add("with-page");
}

async function openPassage(cite) {
  const panel = $("passage");
  $("passage-page").hidden = true;
  panel.classList.remove("with-page");
  $("passage-title").textContent = cite.title || cite.doc_id;
  $("passage-meta").textContent = `${cite.source}${cite.location ? ` ${cite.location}` : ""} · score ${Number(cite.score).toFixed(3)} · loading…`;
  $("passage-text").replaceChildren();
  panel.hidden = false;
  try {
    const s = await (await api(`/v1/chunks/${encodeURIComponent(cite.chunk_id)}?collection=` +
      encodeURIComponent(cite.collection ?? collection()))).json();
    $("passage-meta").textContent = `[${cite.n}] ${s.source}${s.location ? ` ${s.location}` : ""} · document ${s.doc_id} · chunk ${s.chunk_index} ` +
      `(characters ${s.start_char}–${s.end_char}) · score ${Number(cite.score).toFixed(3)} · index v${s.index_version}`;
    const mark = el("mark", { id: "cited-span", text: s.document.slice(s.start_char, s.end_char) });
    $("passage-text").replaceChildren(s.document.slice(0, s.start_char), mark, s.document.slice(s.end_char));
    mark.scrollIntoView({ block: "center" });
    if (s.original && s.pages.length) await showPage(s, s.pages[0]);
  } catch (err) {
    $("passage-meta").textContent = inWords(err);
  }
}

// ---- Operate ---------------------------------------------------------------------------------------------------

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "empty", text: empty });
  return el("table", {}, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) =>
      c instanceof Node ? el("td", {}, c) : el("td", { class: typeof c === "number" ? "num" : "", text: c ?? "–" }))))));
}

function badge(text, cls = "") {
  return el("span", { class: `badge ${cls}`, text });
}

function withBadges(text, ...badges) {
  return el("span", {}, String(text), ...badges.filter(Boolean));
}

function sparkline(values, label) {
  // a small SVG line of a series (120×28 px), its last value beside it
  if (!values.length) return el("span", { class: "empty", text: "no steps logged" });
  const w = 120, h = 28, lo = Math.min(...values), hi = Math.max(...values);
  const x = (i) => (values.length === 1 ? w / 2 : (i * w) / (values.length - 1));
  const y = (v) => (hi === lo ? h / 2 : h - 2 - ((v - lo) * (h - 4)) / (hi - lo));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("aria-label", label);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#1f6feb");
  line.setAttribute("stroke-width", "1.5");
  svg.append(line);
  const last = values[values.length - 1];
  return el("span", {}, svg, ` ${last >= 100 ? Math.round(last) : last.toFixed(3)}`);
}

function servedModel(label) {
  // "sft:v2" → ["sft", 2]; a packaged or hub model has no catalog version
  const m = /^(.+):v(\d+)$/.exec(label || "");
  return m ? [m[1], Number(m[2])] : [label, null];
}

function card(label, value, testid) {
  return el("div", { class: "card", "data-testid": testid },
    el("div", { class: "label", text: label }), el("div", { class: "value", text: value ?? "–" }));
}

async function refresh() {
  $("operate-error").textContent = "";
  $("operate-note").textContent = "loading…";
  let ready, status;
  try {
    const readyz = await fetch("/readyz", { headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY)}` } });
    if (readyz.status === 401) throw await failure(readyz);
    ready = await readyz.json(); // 503 still says what each stage serves
    status = await (await api("/v1/status")).json();
  } catch (err) {
    $("operate-error").textContent = inWords(err);
    $("operate-note").textContent = "";
    return;
  }
  const served = {
    index: ready.retriever?.index_version ?? null,
    generator: servedModel(ready.generator?.generator),
    reranker: servedModel(ready.reranker?.reranker),
  };
  $("serving").replaceChildren(el("div", { class: "cards" },
    card("ready", ready.ready ? "yes" : "no", "ready"),
    card("index version served", served.index, "served-index"),
    card("generator", ready.generator?.generator, "served-generator"),
    card("reranker", ready.reranker?.reranker, "served-reranker"),
    card("embedder", ready.retriever?.embedder, "served-embedder"),
    card("storage", status.storage, "storage")),
  // what each stage computes in, and the hardware that chose it (app/hardware.py)
  el("div", { class: "cards" },
    card("embedder computes", ready.retriever?.computes, "computes-embedder"),
    card("reranker computes", ready.reranker?.computes, "computes-reranker"),
    card("generator computes", ready.generator?.computes, "computes-generator")));

  $("ingest-runs").replaceChildren(table(
    ["run", "state", "submitted", "read", "kept", "dropped", "quarantined", "chunks", "dataset", "index"],
    status.ingest_runs.map((r) => [
      r.run_id, el("span", { class: `state-${r.state}`, text: r.state, title: r.error || "" }), r.submitted_at,
      r.read, r.kept,
      Object.entries(r.dropped).map(([why, n]) => `${why} ${n}`).join(", ") || "none",
      r.quarantined.length || r.refused.length
        ? el("details", {}, el("summary", { text: `${r.quarantined.length} quarantined, ${r.refused.length} refused` }),
          el("ul", {}, ...[...r.quarantined, ...r.refused].map((q) =>
            el("li", { text: `${q.source}: ${q.reason}${q.detail ? ` (${q.detail})` : ""}` }))))
        : "none",
      r.chunks, r.dataset_version, r.index_version]),
    "No ingest run yet: `ragline ingest PATH`."));

  const versions = (items, isServed) => items.map((v) => [
    withBadges(v.version, isServed(v) && badge("served", "served")), v.created_at, v.parent, v.documents, v.chunks,
    v.embedder, v.run_id]);
  $("versions").replaceChildren(
    el("h3", { text: "Indexes" }),
    table(["version", "created", "from dataset", "documents", "chunks", "embedder", "run"],
      versions(status.indexes, (v) => v.version === served.index), "No index version yet."),
    el("h3", { text: "Datasets" }),
    table(["version", "created", "extends", "documents", "chunks", "embedder", "run"],
      versions(status.datasets, () => false), "No dataset version yet."));

  const isServed = (name, version) => [served.generator, served.reranker]
    .some(([n, v]) => n === name && v === version);
  $("models").replaceChildren(table(["model", "versions"], status.models.map((m) => [
    m.name, el("span", {}, ...m.versions.map((v) => el("span", { class: "model-version" }, `v${v.version} `,
      ...[v.version === m.promoted && badge("promoted"), isServed(m.name, v.version) && badge("served", "served")]
        .filter(Boolean), " ")))]),
  "No trained model yet: `ragline train sft|reranker`."));

  $("training-runs").replaceChildren(table(["run", "task", "state", "model", "loss", "tokens/s"],
    status.training_runs.map((r) => [
      r.name, r.task, el("span", { class: `state-${r.state}`, text: r.state, title: r.error || "" }), r.model,
      sparkline(r.loss, `loss of ${r.name}`), sparkline(r.tokens_per_s, `tokens/s of ${r.name}`)]),
    "No training run yet."));

  const pct = (x) => (x == null ? "–" : `${(100 * x).toFixed(0)}%`);
  $("evals").replaceChildren(
    el("h3", { text: "Answers" }),
    table(["run", "dataset", "generator", "questions", "F1", "EM", "citations", "I don't know", "p50 latency"],
      status.evals.answers.map((e) => [e.run_id, `${e.dataset} (${e.split})`, e.generator, e.questions,
        Number(e.f1.toFixed(1)), Number(e.exact_match.toFixed(1)), pct(e.citation_accuracy), pct(e.idk_rate),
        `${e.latency_p50_s.toFixed(2)} s`]),
      "No answer evaluation yet: `ragline eval answers --dataset FILE`."),
    el("h3", { text: "Retrieval" }),
    table(["run", "dataset", "queries", "nDCG@10 by mode"],
      status.evals.retrieval.map((e) => [e.run_id, `${e.dataset} (${e.split})`, e.queries,
        Object.entries(e.modes).map(([mode, m]) => `${mode} ${m["ndcg@10"].toFixed(3)}`).join(", ")]),
      "No retrieval evaluation yet: `ragline eval retrieval --dataset DIR`."));
  $("operate-note").textContent = `as of ${new Date().toLocaleTimeString()}`;
}

// ---- wiring ----------------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", useKey);
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask-form").requestSubmit(); }
  });
  $("new-chat").addEventListener("click", () => { thread.length = 0; $("thread").replaceChildren(); });
  $("refresh").addEventListener("click", refresh);
  $("passage-close").addEventListener("click", () => { $("passage").hidden = true; });
  $("forget-key").addEventListener("click", () => { sessionStorage.removeItem(KEY); askForKey(); });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
  if (sessionStorage.getItem(KEY)) {
    $("forget-key").hidden = false;
    loadCollections().catch(() => {}); // an expired key: the first question asks for a new one
  }
  show("ask");
});
