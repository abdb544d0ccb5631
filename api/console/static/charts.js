// The answers summarised from every match (docs/contract.md §3.7), drawn: a funnel's bars, the next events'
// bars by offset, each step's duration histogram, the counts by a field.  Plain SVG, no library.

import {human} from "/console/timeline.js";

const SVG = "http://www.w3.org/2000/svg";  // the SVG namespace name (an identifier, never fetched)
const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en"));
const ROW = 24;      // a bar's row height
const LABEL = 260;   // the width of the labels left of the bars
const WIDTH = 820;   // the chart's drawing width

function el(name, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

/** A duration in milliseconds for people (the timeline's units). */
export function duration(ms) {
  return ms === null || ms === undefined ? "–" : human(ms);
}

function clip(text, most = 38) {
  const s = String(text);
  return s.length > most ? `${s.slice(0, most - 1)}…` : s;
}

/** Horizontal bars: each row {label, value, note}, scaled to the largest value. */
function bars(rows, kind) {
  const most = Math.max(1, ...rows.map((r) => r.value));
  const svg = el("svg", {class: `chart ${kind}`, viewBox: `0 0 ${LABEL + WIDTH} ${rows.length * ROW + 6}`,
    width: LABEL + WIDTH, height: rows.length * ROW + 6, role: "img"});
  rows.forEach((r, i) => {
    const y = i * ROW + 3;
    const w = Math.max(r.value > 0 ? 1 : 0, (r.value / most) * (WIDTH - 200));
    const label = el("text", {class: "label", x: LABEL - 8, y: y + ROW * 0.65, "text-anchor": "end"},
      clip(r.label));
    label.append(el("title", {}, String(r.label)));
    svg.append(label);
    const bar = el("rect", {class: `bar${r.other ? " other" : ""}`, x: LABEL, y: y + 3, width: w,
      height: ROW - 8, "data-value": r.value});
    bar.append(el("title", {}, `${r.label}: ${fmt(r.value)}${r.note ? ` · ${r.note}` : ""}`));
    svg.append(bar, el("text", {class: "value", x: LABEL + w + 6, y: y + ROW * 0.65},
      `${fmt(r.value)}${r.note ? `  ${r.note}` : ""}`));
  });
  return svg;
}

/** A histogram of one durations entry: its buckets as columns, min / p50 / p90 / max beneath. */
function histogram(d) {
  const height = 90;
  const buckets = d.histogram || [];
  const most = Math.max(1, ...buckets.map((b) => b.count));
  const width = WIDTH + LABEL;
  const svg = el("svg", {class: "chart histogram", viewBox: `0 0 ${width} ${height + 20}`, width,
    height: height + 20, role: "img"});
  const step = buckets.length ? width / buckets.length : width;
  buckets.forEach((b, i) => {
    const hgt = (b.count / most) * height;
    const col = el("rect", {class: "bar", x: i * step + 1, y: height - hgt, width: Math.max(1, step - 2),
      height: hgt, "data-count": b.count});
    col.append(el("title", {}, `${duration(b.lo_ms)} – ${duration(b.hi_ms)}: ${fmt(b.count)}`));
    svg.append(col);
  });
  svg.append(el("text", {class: "label", x: 0, y: height + 15}, duration(d.min_ms)),
    el("text", {class: "label", x: width, y: height + 15, "text-anchor": "end"}, duration(d.max_ms)));
  return svg;
}

function block(title, note, chart) {
  const div = document.createElement("div");
  div.className = "summary-chart";
  const h = document.createElement("h3");
  h.textContent = title;
  const p = document.createElement("p");
  p.className = "muted";
  p.textContent = note;
  div.append(h, p, chart);
  return div;
}

/** Is ``answer`` a summary (funnel, next, durations, counts by a field)? */
export function isSummary(answer) {
  return Boolean(answer && (answer.funnel || answer.next || answer.durations || answer.groups));
}

/** The head line of a summary's answer. */
export function summaryLine(a) {
  if (a.funnel) {
    const last = a.funnel.length ? a.funnel[a.funnel.length - 1].reached : 0;
    return `${fmt(a.unit_count)} ${a.units} reached step 1 · ${fmt(last)} every step`;
  }
  if (a.next) return `${fmt(a.count)} match${a.count === 1 ? "" : "es"} · what follows them`;
  if (a.durations) return `${fmt(a.count)} match${a.count === 1 ? "" : "es"} · the time between steps`;
  return `${fmt(a.count)} match${a.count === 1 ? "" : "es"}` + (a.case_count !== undefined
    ? ` in ${fmt(a.case_count)} case${a.case_count === 1 ? "" : "s"}` : "") + ` · ${fmt(a.group_count)} value(s)`;
}

/** The charts of a summary's answer, as nodes to put in the page. */
export function summaryCharts(a) {
  if (a.funnel) {
    const first = Math.max(1, a.funnel.length ? a.funnel[0].reached : 1);
    return [block("Funnel", `how far the ${a.units} get, step by step; the time from step 1 to each (median)`,
      bars(a.funnel.map((s) => ({label: `${s.step}. ${s.label}`, value: s.reached,
        note: `${(100 * s.reached / first).toFixed(1)}% · ${duration(s.median_ms)}`})), "funnel"))];
  }
  if (a.next) {
    const offsets = [...new Set(a.next.map((r) => r.offset))];
    return offsets.map((o) => block(o === 1 ? "What comes next" : `${o} events after`,
      "the events after each match's last one (in its case), and the median time to them",
      bars(a.next.filter((r) => r.offset === o).slice(0, 15).map((r) => ({
        label: r.type === null ? "(nothing: the case ended)" : r.type, value: r.count, other: r.type === null,
        note: r.type === null ? "" : `after ${duration(r.median_ms)}`})), "next")));
  }
  if (a.durations) {
    return a.durations.map((d) => block(`${d.from} → ${d.to}${d.whole ? " (first to last)" : ""}`,
      `${fmt(d.count)} gaps · p50 ${duration(d.p50_ms)} · p90 ${duration(d.p90_ms)} · p99 ${duration(d.p99_ms)}`,
      histogram(d)));
  }
  const rows = a.groups.map((g) => ({label: g.value === null ? "(none)" : g.value, value: g.count}));
  if (a.other && a.other.groups) {
    rows.push({label: `(${fmt(a.other.groups)} other values)`, value: a.other.count, other: true});
  }
  return [block(a.case_count !== undefined ? "Cases by value" : "Matches by value",
    "the values of the bound event's field, most first", bars(rows, "groups"))];
}
