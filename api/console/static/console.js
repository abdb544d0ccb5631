// The seqsketch web console: everything it shows comes from the public /v1 API of the server that served it.

import {QueryEditor, partitionOf, strategyOf, typeLiteral, withStrategy} from "/console/editor.js";
import {Timeline, human, parseTs} from "/console/timeline.js";
import {isSummary, summaryCharts, summaryLine} from "/console/charts.js";

const TOKEN_KEY = "seqsketch.token";
const JOBS_KEY = "seqsketch.jobs";
const $ = (id) => document.getElementById(id);
const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en"));

const state = {
  health: null, datasets: [], selected: null, info: null, density: null, answer: null, candidates: null,
  query: "", mode: "verified", events: new Map(), typesShown: 12, running: false,
};

// --- talking to the API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
    this.position = error && error.position;
  }
}

async function api(path, {method = "GET", body = undefined, contentType = "application/json"} = {}) {
  const headers = {Accept: "application/json"};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = contentType;
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  const response = await fetch(`/v1${path}`, {method, headers, body: payload, credentials: "omit",
    cache: "no-store"});
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (!response.ok) {
    if (response.status === 401) showTokenBox(true);
    throw new ApiError(response.status, data && data.error);
  }
  return data;
}

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

// --- health and token -------------------------------------------------------------------------------------

function showTokenBox(needed) {
  $("token-box").hidden = !(needed || (state.health && state.health.auth === "tokens"));
}

async function loadHealth() {
  try {
    state.health = await api("/health");
    const auth = state.health.auth === "tokens" ? "API tokens required" : "open to this machine only";
    $("health").textContent = `v${state.health.version} · catalog ${state.health.catalog_revision} · ${auth}`;
    showTokenBox(false);
  } catch (err) {
    $("health").textContent = `the server did not answer: ${err.message}`;
  }
}

function setupToken() {
  $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  const use = () => {
    const value = $("token").value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
    refreshAll();
  };
  $("token-use").addEventListener("click", use);
  $("token").addEventListener("keydown", (e) => { if (e.key === "Enter") use(); });
  $("token-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    refreshAll();
  });
}

// --- datasets ---------------------------------------------------------------------------------------------

async function loadDatasets() {
  const list = $("datasets");
  try {
    const body = await api("/datasets");
    state.datasets = body.datasets;
    $("datasets-note").textContent = state.datasets.length ? "" : "No datasets yet: build one below.";
  } catch (err) {
    state.datasets = [];
    $("datasets-note").textContent = err.status === 401 || err.status === 403
      ? "Type a token with read scope above to see the datasets." : `Could not list the datasets: ${err.message}`;
  }
  list.replaceChildren(...state.datasets.map((d) => h("li", {
    class: d.name === state.selected ? "selected" : "", "data-name": d.name, title: `select ${d.name}`,
    onclick: () => selectDataset(d.name),
  }, h("span", {text: d.name}), h("span", {class: "state",
    text: d.state === "ready" ? `${fmt(d.events)} events` : d.state}))));
  if (!state.selected && state.datasets.some((d) => d.state === "ready")) {
    const fromHash = new URLSearchParams(location.hash.slice(1)).get("dataset");
    const pick = state.datasets.find((d) => d.name === fromHash) || state.datasets.find((d) => d.state === "ready");
    selectDataset(pick.name);
  }
}

async function selectDataset(name) {
  state.selected = name;
  for (const li of $("datasets").children) li.classList.toggle("selected", li.dataset.name === name);
  $("append-target").textContent = name;
  $("build-name").placeholder = name;
  clearAnswer();
  try {
    const [info, density] = await Promise.all([api(`/datasets/${encodeURIComponent(name)}`),
      api(`/datasets/${encodeURIComponent(name)}/density`).catch(() => null)]);
    if (state.selected !== name) return;
    state.info = info;
    state.density = density;
    renderInfo();
    editor.setVocabulary(info.types, info.attrs);
    if (!editor.value.trim()) editor.value = exampleQuery(info);
    drawTimeline();
  } catch (err) {
    $("summary").textContent = `Could not describe ${name}: ${err.message}`;
  }
}

function exampleQuery(info) {
  const types = Object.entries(info.types || {}).sort((a, b) => b[1] - a[1]).map(([t]) => t);
  if (!types.length) return "";
  const a = typeLiteral(types[0]), b = typeLiteral(types[1] || types[0]);
  const partition = info.attrs && "case" in info.attrs ? " PARTITION BY case" : "";
  return `PATTERN SEQ(${a} a, ${b} b)${partition} WITHIN 1 day`;
}

function renderInfo() {
  const info = state.info;
  $("info-panel").hidden = false;
  $("info-title").textContent = info.name;
  const index = info.index || null;
  const facts = [["events", fmt(info.events)], ["from", when(info.start_ts)], ["to", when(info.end_ts)],
    ["state", info.state || "ready"], ["store", bytes(info.store_bytes)]];
  if (info.retention || info.retained_from) {
    // retention: the stored history starts at retained_from; what went before lives on as a decayed summary
    facts.push(["retention", `keeps ${info.retention || "all from now on"}` +
      (info.retained_from ? ` · history from seq ${fmt(info.retained_from)}` : "")]);
    if (info.decayed) facts.push(["retired", `seqs ${fmt(info.decayed.first_seq)}–${fmt(info.decayed.end_seq - 1)} ` +
      `as a decayed summary of ${fmt(info.decayed.units)} filters (${bytes(info.decayed.bytes)}), approximate only`]);
  }
  if (index) {
    facts.push(["index", `${bytes(index.bytes)} · version ${info.index_version ?? index.version}`],
      ["tree", `${fmt(index.nodes)} Bloom filters in ${index.levels} levels, ${fmt(index.leaf_size)} events a leaf`],
      ["filters", `m = ${fmt(index.m)} bits, k = ${index.k}, expected fpq ${Number(index.expected_fpq).toExponential(1)}`],
      ["digest", `${String(index.index_digest || "").slice(0, 16)}…`]);
  } else {
    facts.push(["index", "none"]);
  }
  if (info.attrs) facts.push(["attributes", Object.entries(info.attrs).map(([k, v]) => `${k}: ${v}`).join(", ") || "–"]);
  $("info").replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {text: k}), h("dd", {text: v})]));
  const types = Object.entries(info.types || {}).sort((a, b) => b[1] - a[1]);
  const max = types.length ? types[0][1] : 1;
  $("types-count").textContent = `(${types.length})`;
  const rows = types.slice(0, state.typesShown).map(([t, n]) => {
    const bar = h("div", {class: "bar"});
    bar.style.width = `${Math.max(1, (100 * n) / max)}%`;
    return h("tr", {}, h("td", {class: "name", text: t}), h("td", {class: "n", text: fmt(n)}),
      h("td", {class: "barcell"}, bar));
  });
  $("types").replaceChildren(...rows);
  $("types-more").hidden = types.length <= state.typesShown;
}

function when(iso) {
  return iso ? String(iso).replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace("+00:00", " UTC") : "–";
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n), u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}

// --- queries ----------------------------------------------------------------------------------------------

function clearAnswer() {
  state.answer = null;
  state.candidates = null;
  state.events = new Map();
  $("summary").textContent = "Run a query to see its answer on the timeline.";
  $("explain").replaceChildren();
  $("stats").replaceChildren();
  $("match-detail").hidden = true;
  $("match-list").replaceChildren();
  $("query-error").hidden = true;
  drawTimeline();
}

// --- watch: the query kept standing, its new matches added as they become certain -----------------------

async function startWatch() {
  await stopWatch();
  if (!state.selected || !state.answer || !state.query || state.answer.mode === "approximate") {
    $("watch-state").textContent = "run a query first (verified or exact)";
    $("watch").checked = false;
    return;
  }
  const name = state.selected;
  let watch;
  try {
    watch = await api(`/datasets/${encodeURIComponent(name)}/watches`,
      {method: "POST", body: {query: state.query, mode: state.mode, from: "now"}});
  } catch (err) {
    $("watch-state").textContent = err.message;
    $("watch").checked = false;
    return;
  }
  const controller = new AbortController();
  state.watch = {name, id: watch.id, controller, added: 0};
  $("watch-state").textContent = "watching: new matches are added as soon as they are certain";
  const headers = {Accept: "text/event-stream"};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const response = await fetch(watch.stream,
      {headers, credentials: "omit", cache: "no-store", signal: controller.signal});
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const lines = block.split("\n");
        const event = (lines.find((l) => l.startsWith("event:")) || "event: message").slice(6).trim();
        const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
        if (event === "match" && data) addLiveMatch(JSON.parse(data));
      }
    }
  } catch (err) {
    if (err.name !== "AbortError") $("watch-state").textContent = `the watch stopped: ${err.message}`;
  }
}

function addLiveMatch(match) {
  if (!state.answer || !state.watch) return;
  state.answer.matches = [...(state.answer.matches || []), match];
  if (typeof state.answer.count === "number") state.answer.count += 1;
  state.watch.added += 1;
  $("watch-state").textContent = `watching: ${fmt(state.watch.added)} new match(es) added`;
  renderAnswer();
}

async function stopWatch() {
  const watch = state.watch;
  state.watch = null;
  if (!watch) return;
  watch.controller.abort();
  try { await api(`/datasets/${encodeURIComponent(watch.name)}/watches/${watch.id}`, {method: "DELETE"}); } catch { /* gone */ }
  $("watch-state").textContent = "";
}

async function runQuery() {
  if ($("watch").checked) { $("watch").checked = false; await stopWatch(); }
  if (!state.selected || state.running) return;
  const query = editor.value.trim();
  if (!query) return;
  const mode = document.querySelector("input[name=mode]:checked").value;
  const limitValue = parseInt($("limit").value, 10);
  const limit = Number.isFinite(limitValue) && limitValue >= 1 ? limitValue : null;
  const name = state.selected;
  state.running = true;
  $("run").disabled = true;
  $("run").textContent = "Running…";
  $("query-error").hidden = true;
  editor.setError(null);
  location.hash = new URLSearchParams({dataset: name}).toString();
  try {
    // the candidates come from an approximate answer (cheap); the chosen mode gives the answer itself
    // with the listed matches, where all of them lie (a density strip: the listed ones are only the first)
    const body = mode === "approximate" ? {query, mode, limit} : {query, mode, limit, density: 800};
    const asked = api(`/datasets/${encodeURIComponent(name)}/query`, {method: "POST", body});
    const candidates = mode === "approximate" ? null
      : api(`/datasets/${encodeURIComponent(name)}/query`, {method: "POST", body: {query, mode: "approximate"}})
        .catch(() => null);
    const answer = await asked;
    state.answer = answer;
    state.candidates = mode === "approximate" ? answer : await candidates;
    state.query = query;
    state.mode = mode;
    state.events = new Map();
    renderAnswer();
  } catch (err) {
    state.answer = null;
    state.candidates = null;
    const where = err.position && !/line \d+, column \d+/.test(err.message)
      ? ` (line ${err.position.line}, column ${err.position.column})` : "";
    $("query-error").textContent = `${err.code || "error"}: ${err.message}${where}`;
    $("query-error").hidden = false;
    editor.setError(err.position || null);
    $("summary").textContent = "No answer.";
    $("explain").replaceChildren();
    $("stats").replaceChildren();
    $("match-list").replaceChildren();
    $("match-detail").hidden = true;
    drawTimeline();
  } finally {
    state.running = false;
    $("run").disabled = false;
    $("run").textContent = "Run query";
  }
}

function renderAnswer() {
  const a = state.answer;
  const matches = a.matches || [];
  const parts = [];
  if (isSummary(a)) {  // a funnel, the next events, durations, counts by a field: drawn, not listed
    parts.push(h("b", {text: summaryLine(a)}));
  } else if (a.mode === "approximate") {
    parts.push(h("b", {text: a.exists ? "maybe" : "no"}), " — ",
      `${fmt((a.intervals || []).length)} candidate interval(s) from the index alone`);
  } else {
    // a limit stops the search once its first matches are certain: the count is then unknown
    parts.push(h("b", {text: a.count === null || a.count === undefined
      ? (a.truncated ? `more than ${fmt(matches.length)} matches` : `${fmt(matches.length)}+ matches`)
      : `${fmt(a.count)} match${a.count === 1 ? "" : "es"}`}), ` · exists: ${a.exists}`);
    if (matches.length) parts.push(` · ${fmt(matches.length)} drawn${a.truncated ? " (truncated by the limit)" : ""}`);
    if (a.cases) {
      parts.push(` · in ${fmt(a.case_count ?? a.cases.length)} case${(a.case_count ?? a.cases.length) === 1 ? "" : "s"}`);
      if (a.truncated) parts.push(` · ${fmt(a.cases.length)} listed (truncated by the limit)`);
    }
  }
  parts.push(h("span", {class: "muted", text: `  [${a.mode}, ${a.strategy || strategyOf(state.query)}]`}));
  $("summary").replaceChildren(...parts);
  $("summary").classList.remove("muted");
  renderExplain();
  renderStats();
  renderMatchList();
  $("match-detail").hidden = true;
  drawTimeline();
}

function coverage(intervals) {
  return (intervals || []).reduce((n, iv) => n + (iv.end_seq - iv.start_seq + 1), 0);
}

function pct(part, whole) {
  if (!whole) return "0 %";
  const p = (100 * part) / whole;
  return `${p < 0.01 && p > 0 ? p.toExponential(1) : p < 10 ? p.toFixed(2) : p.toFixed(1)} %`;
}

function renderExplain() {
  const a = state.answer, s = a.stats || {}, c = state.candidates;
  const total = s.events_total;
  const lines = [];
  if (c && c.stats) {
    const covered = coverage(c.intervals);
    lines.push(`The index probed ${fmt(c.stats.nodes_probed)} Bloom filters in ${c.stats.approximate_ms} ms and `
      + `found ${fmt((c.intervals || []).length)} candidate interval(s) covering ${fmt(covered)} of ${fmt(total)} events `
      + `(${pct(covered, total)}). Bloom filters answer "maybe" or "no", so every match lies inside a candidate; `
      + `expected false-positive rate ${Number(c.expected_false_positive_rate || 0).toExponential(1)}.`);
  }
  if (a.mode === "verified") {
    lines.push(`The exact engine then read only the candidates: ${fmt(s.events_scanned)} of ${fmt(total)} events `
      + `(${pct(s.events_scanned, total)}) in ${s.verify_ms} ms, and confirmed ${a.count ?? "at least " + fmt((a.matches || []).length)} `
      + `match(es) — the same answer as a full scan.`);
  } else if (a.mode === "exact") {
    lines.push(`The exact engine read the whole history, ${fmt(s.events_scanned)} events, in ${s.verify_ms} ms, `
      + "without the index: the reference the other modes are held to.");
  }
  const partition = partitionOf(state.query);
  if (partition.length && (a.matches || []).length) {
    lines.push(`Every match binds events with one ${partition.join(", ")}: click a match to see it.`);
  }
  if (a.explain) lines.push(typeof a.explain === "string" ? a.explain : JSON.stringify(a.explain));
  $("explain").replaceChildren(...lines.map((t) => h("p", {text: t})));
}

function stat(value, label) {
  return h("div", {class: "stat"}, h("b", {text: value}), h("span", {text: label}));
}

function renderStats() {
  const s = state.answer.stats || {};
  const total = s.events_total || 0;
  const scanned = state.answer.mode === "approximate" ? 0 : s.events_scanned || 0;
  const spared = total ? 100 - (100 * scanned) / total : 0;
  const meter = h("div", {class: "meter"}, h("div"));
  meter.firstChild.style.width = `${total ? Math.max(0.2, (100 * scanned) / total) : 0}%`;
  $("stats").replaceChildren(
    stat(`${s.approximate_ms ?? 0} ms`, "index"),
    stat(`${s.verify_ms ?? 0} ms`, state.answer.mode === "exact" ? "full scan" : "verify"),
    stat(`${s.total_ms ?? 0} ms`, "total"),
    stat(fmt(s.nodes_probed), "filters probed"),
    stat(fmt(s.candidate_intervals), "candidate intervals"),
    stat(`${fmt(scanned)} / ${fmt(total)}`, "events scanned / total"),
    h("div", {class: "stat spared"}, h("b", {
      text: state.answer.mode === "exact" ? "the index was not used: every event was read"
        : `the index spared ${spared.toFixed(spared > 99.9 || spared < 1 ? 3 : 1)} % of the history`}),
    h("span", {text: `${fmt(scanned)} of ${fmt(total)} events read (amber)`}), meter),
  );
}

function renderCaseList() {
  // RETURN cases: each case once, with its number of matches and its first match
  const rows = state.answer.cases.slice(0, 500).map((c, i) => h("tr", {},
    h("td", {text: `#${i + 1}`}), h("td", {class: "mono", text: typeof c.case === "object" && c.case !== null
      ? Object.values(c.case).join(", ") : String(c.case)}),
    h("td", {text: fmt(c.matches)}), h("td", {class: "mono", text: `${c.start_seq}–${c.end_seq}`}),
    h("td", {class: "mono", text: `${(c.start_ts || "").slice(0, 19)} → ${(c.end_ts || "").slice(0, 19)}`})));
  $("match-list").replaceChildren(h("h3", {text: "Cases"}), h("table", {},
    h("thead", {}, h("tr", {}, h("th", {text: ""}), h("th", {text: "case"}), h("th", {text: "matches"}),
      h("th", {text: "first match (seq)"}), h("th", {text: "first match (UTC)"}))), h("tbody", {}, rows)));
}

function renderMatchList() {
  if (isSummary(state.answer)) { $("match-list").replaceChildren(...summaryCharts(state.answer)); return; }
  if (state.answer.cases && state.answer.cases.length) { renderCaseList(); return; }
  const matches = state.answer.matches || [];
  if (!matches.length) { $("match-list").replaceChildren(); return; }
  const rows = matches.slice(0, 500).map((m, i) => h("tr", {"data-i": i, onclick: () => openMatch(i)},
    h("td", {text: `#${i + 1}`}), h("td", {class: "mono", text: `${m.start_seq}–${m.end_seq}`}),
    h("td", {class: "mono", text: `${(m.start_ts || "").slice(0, 19)} → ${(m.end_ts || "").slice(0, 19)}`}),
    h("td", {class: "mono", text: Object.entries(m.bindings).map(([k, v]) => `${k}=${v.join(",")}`).join(" ")})));
  $("match-list").replaceChildren(h("h3", {text: "Matches"}), h("table", {},
    h("thead", {}, h("tr", {}, h("th", {text: ""}), h("th", {text: "seq"}), h("th", {text: "time (UTC)"}),
      h("th", {text: "bindings"}))), h("tbody", {}, rows)));
}

async function openMatch(i) {
  const m = (state.answer.matches || [])[i];
  if (!m) return;  // (a case's first match on the timeline: the case list says it)
  timeline.select(i);
  for (const tr of $("match-list").querySelectorAll("tbody tr")) tr.classList.toggle("selected", Number(tr.dataset.i) === i);
  const panel = $("match-detail");
  panel.hidden = false;
  panel.replaceChildren(h("h3", {text: `Match #${i + 1} · seq ${m.start_seq}–${m.end_seq}`}),
    h("p", {class: "muted", text: "fetching its events…"}));
  try {
    let events = state.events.get(i);
    if (!events) {
      // the same question again with the events bound to the first i+1 matches (answers keep their order)
      const answer = await api(`/datasets/${encodeURIComponent(state.selected)}/query`, {method: "POST",
        body: {query: state.query, mode: state.mode, limit: i + 1, include_events: true}});
      (answer.matches || []).forEach((mm, j) => state.events.set(j, mm.events || []));
      events = state.events.get(i) || [];
    }
    renderMatchDetail(i, events);
  } catch (err) {
    panel.replaceChildren(h("h3", {text: `Match #${i + 1}`}), h("p", {class: "error", text: err.message}));
  }
}

function renderMatchDetail(i, events) {
  const m = state.answer.matches[i];
  const variable = new Map();
  for (const [name, seqs] of Object.entries(m.bindings)) for (const s of seqs) variable.set(s, name);
  const keys = new Set(partitionOf(state.query));
  const partition = [...keys].map((k) => {
    const values = new Set(events.map((e) => JSON.stringify((e.attrs || {})[k])));
    return values.size === 1 ? `${k} = ${JSON.parse([...values][0])}` : null;
  }).filter(Boolean);
  const rows = events.map((e) => h("tr", {"data-seq": e.seq},
    h("td", {class: "mono", text: e.seq}), h("td", {class: "mono", text: e.ts}),
    h("td", {text: variable.get(e.seq) || ""}), h("td", {text: e.type}),
    h("td", {class: "attrs"}, Object.entries(e.attrs || {}).map(([k, v]) => h("span", {
      class: keys.has(k) ? "chip key" : "chip", text: `${k}=${v === null ? "null" : v}`})))));
  const close = h("button", {type: "button", class: "quiet", text: "close", onclick: () => {
    $("match-detail").hidden = true; timeline.select(-1);
  }});
  $("match-detail").replaceChildren(
    h("h3", {}, `Match #${i + 1} · seq ${m.start_seq}–${m.end_seq} · ${m.start_ts} → ${m.end_ts}`,
      h("span", {class: "spacer"}), close),
    partition.length ? h("p", {text: `partition: ${partition.join(", ")}`}) : null,
    h("table", {class: "events"}, h("thead", {}, h("tr", {}, ...["seq", "ts", "variable", "type", "attributes"]
      .map((t) => h("th", {text: t})))), h("tbody", {}, rows)));
}

// --- the timeline -----------------------------------------------------------------------------------------

function drawTimeline() {
  const info = state.info;
  if (!info || !info.start_ts) { timeline.setData(null); $("view-range").textContent = ""; return; }
  const start = parseTs(info.start_ts), end = parseTs(info.end_ts);
  const a = state.answer;
  const d = state.density;
  const data = {start, end, candidates: [], matches: [], intervals: []};
  if (d && d.counts && d.start_ts) data.density = {start: parseTs(d.start_ts), end: parseTs(d.end_ts) + 1, counts: d.counts};
  const md = a && a.match_density;
  if (md && md.counts && md.start_ts) data.matchDensity = {start: parseTs(md.start_ts), end: parseTs(md.end_ts) + 1, counts: md.counts};
  if (state.candidates && state.candidates.intervals) {
    data.candidates = state.candidates.intervals.map((iv) => ({start: parseTs(iv.start_ts), end: parseTs(iv.end_ts)}));
  }
  if (a && a.matches) {
    data.matches = a.matches.map((m, i) => ({start: parseTs(m.start_ts), end: parseTs(m.end_ts),
      title: `match #${i + 1}: seq ${m.start_seq}–${m.end_seq}\n${m.start_ts} → ${m.end_ts}`}));
  } else if (a && a.cases) {  // each case's first match
    data.matches = a.cases.map((c) => ({start: parseTs(c.start_ts), end: parseTs(c.end_ts),
      title: `case ${typeof c.case === "object" && c.case !== null ? Object.values(c.case).join(", ") : c.case}: `
        + `${c.matches} match(es), the first seq ${c.start_seq}–${c.end_seq}\n${c.start_ts} → ${c.end_ts}`}));
  } else if (a && a.mode !== "approximate" && a.intervals) {
    data.intervals = a.intervals.map((iv) => ({start: parseTs(iv.start_ts), end: parseTs(iv.end_ts),
      title: `seq ${iv.start_seq}–${iv.end_seq}`}));
  }
  timeline.setData(data);
}

function showView(view, whole) {
  const iso = (t) => new Date(t).toISOString().replace(".000Z", "Z");
  $("view-range").textContent = `${iso(view[0])} → ${iso(view[1])} (${human(view[1] - view[0])}${whole ? ", the whole history" : ""})`;
  $("zoom-reset").disabled = whole;
}

// --- builds and appends -----------------------------------------------------------------------------------

async function loadInputs() {
  const select = $("build-input");
  try {
    const body = await api("/inputs");
    // event logs first (any file can be read as text, but these are what builds usually take)
    const log = (p) => (/\.(xes|xes\.gz|csv|jsonl|ndjson|parquet)$/i.test(p) ? 0 : 1);
    const inputs = [...body.inputs].sort((a, b) => log(a) - log(b) || a.localeCompare(b));
    select.replaceChildren(...inputs.map((p) => h("option", {value: p, text: p})));
    $("build-note").textContent = body.inputs.length ? "" : "The server's input roots hold no files.";
  } catch (err) {
    select.replaceChildren();
    $("build-note").textContent = err.status === 401 || err.status === 403
      ? "A token is needed to list the server's inputs." : `Could not list the inputs: ${err.message}`;
  }
}

function savedJobs() {
  try { return JSON.parse(sessionStorage.getItem(JOBS_KEY) || "[]"); } catch { return []; }
}

async function startBuild() {
  const name = $("build-name").value.trim() || $("build-name").placeholder;
  const input = $("build-input").value;
  if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(name) || !input) {
    $("build-note").textContent = "Give a dataset name (a-z, 0-9, _ and -) and pick an input.";
    return;
  }
  try {
    const job = await api(`/datasets/${encodeURIComponent(name)}/builds`, {method: "POST", body: {
      inputs: [input], engine: $("build-engine").value, replace: $("build-replace").checked}});
    const jobs = savedJobs().filter((id) => id !== job.job_id);
    jobs.unshift(job.job_id);
    sessionStorage.setItem(JOBS_KEY, JSON.stringify(jobs.slice(0, 8)));
    $("build-note").textContent = `Build of ${name} queued.`;
    watchJob(job.job_id);
    loadDatasets();
  } catch (err) {
    $("build-note").textContent = `${err.code || "error"}: ${err.message}`;
  }
}

const watched = new Set();

async function watchJob(id) {
  if (watched.has(id)) return;
  watched.add(id);
  let li = document.querySelector(`#jobs li[data-job="${CSS.escape(id)}"]`);
  if (!li) {
    li = h("li", {"data-job": id});
    $("jobs").prepend(li);
  }
  for (;;) {
    let job;
    try { job = await api(`/jobs/${encodeURIComponent(id)}`); } catch (err) {
      li.replaceChildren(h("span", {class: "error", text: `job ${id.slice(0, 8)}: ${err.message}`}));
      break;
    }
    renderJob(li, job);
    if (job.state === "succeeded" || job.state === "failed") {
      if (job.state === "succeeded") {
        await loadDatasets();
        if (job.dataset === state.selected || !state.selected) selectDataset(job.dataset);
      }
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  watched.delete(id);
}

function renderJob(li, job) {
  li.className = job.state;
  const bar = h("div");
  bar.style.width = `${Math.round(100 * (job.progress || 0))}%`;
  const elapsed = job.started ? ((job.finished ? Date.parse(job.finished) : Date.now()) - Date.parse(job.started)) : 0;
  li.replaceChildren(
    h("div", {}, h("span", {class: "jobstate", text: job.state}), ` · ${job.dataset} · ${Math.round(100 * (job.progress || 0))} %`,
      elapsed ? ` · ${human(elapsed)}` : ""),
    h("div", {class: "progress"}, bar),
    h("div", {class: job.error ? "error" : "muted", text: job.error ? `${job.error.code}: ${job.error.message}`
      : job.message || ""}));
}

async function sendAppend() {
  const name = state.selected;
  const text = $("append-body").value.trim();
  if (!name || !text) { $("append-note").textContent = "Select a dataset and write some events."; return; }
  const ndjson = !text.startsWith("[");
  try {
    const r = await api(`/datasets/${encodeURIComponent(name)}/events`, {method: "POST", body: text,
      contentType: ndjson ? "application/x-ndjson" : "application/json"});
    $("append-note").textContent = `Appended ${fmt(r.appended)} event(s): seq ${fmt(r.first_seq)}–${fmt(r.last_seq)}.`;
    await loadDatasets();
    selectDataset(name);
  } catch (err) {
    const where = err.position ? ` (line ${err.position.line})` : "";
    $("append-note").textContent = `${err.code || "error"}: ${err.message}${where}`;
  }
}

// --- wiring -----------------------------------------------------------------------------------------------

const editor = new QueryEditor($("query"), $("highlight"), $("completions"));
const timeline = new Timeline($("timeline"), {onMatch: (i) => openMatch(i), onView: showView});

function refreshAll() {
  loadHealth().then(() => Promise.all([loadDatasets(), loadInputs()]));
}

editor.onRun = runQuery;
editor.onChange = () => {
  $("strategy").value = strategyOf(editor.value);
  if (!editor.error) $("query-error").hidden = true;
};
$("run").addEventListener("click", runQuery);
$("watch").addEventListener("change", () => ($("watch").checked ? startWatch() : stopWatch()));
$("strategy").addEventListener("change", () => {
  const text = editor.value;
  const chosen = $("strategy").value;
  // the default needs no clause, unless the query names another one that must be replaced
  editor.value = chosen === "skip_till_next_match" && !/\bSTRATEGY\b/i.test(text) ? text : withStrategy(text, chosen);
});
$("refresh").addEventListener("click", refreshAll);
$("zoom-reset").addEventListener("click", () => timeline.reset());
$("types-more").addEventListener("click", () => { state.typesShown = 10000; renderInfo(); });
$("build-start").addEventListener("click", startBuild);
$("append-send").addEventListener("click", sendAppend);
setupToken();
refreshAll();
for (const id of savedJobs()) watchJob(id);
