// The answer to a query: asked, summarised, explained, listed, drawn on the timeline, and each match's events.

import {QueryEditor, partitionOf, strategyOf} from "/console/editor.js";
import {Timeline, human, parseTs} from "/console/timeline.js";
import {isSummary, summaryCharts, summaryLine} from "/console/charts.js";
import {$, api, fmt, h, state} from "/console/shared.js";
import {stopWatch} from "/console/watch.js";

export const editor = new QueryEditor($("query"), $("highlight"), $("completions"));
export const timeline = new Timeline($("timeline"), {onMatch: (i) => openMatch(i), onView: showView});

export function clearAnswer() {
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

export async function runQuery() {
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

export function renderAnswer() {
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

export function coverage(intervals) {
  return (intervals || []).reduce((n, iv) => n + (iv.end_seq - iv.start_seq + 1), 0);
}

export function pct(part, whole) {
  if (!whole) return "0 %";
  const p = (100 * part) / whole;
  return `${p < 0.01 && p > 0 ? p.toExponential(1) : p < 10 ? p.toFixed(2) : p.toFixed(1)} %`;
}

export function renderExplain() {
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

export function stat(value, label) {
  return h("div", {class: "stat"}, h("b", {text: value}), h("span", {text: label}));
}

export function renderStats() {
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

export function renderCaseList() {
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

export function renderMatchList() {
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

export async function openMatch(i) {
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

export function renderMatchDetail(i, events) {
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

export function drawTimeline() {
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

export function showView(view, whole) {
  const iso = (t) => new Date(t).toISOString().replace(".000Z", "Z");
  $("view-range").textContent = `${iso(view[0])} → ${iso(view[1])} (${human(view[1] - view[0])}${whole ? ", the whole history" : ""})`;
  $("zoom-reset").disabled = whole;
}
