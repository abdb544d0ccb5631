// The timeline of a dataset's history in SVG: events over time, candidate intervals, and matches drawn where
// they lie; zoom by dragging across it or with the wheel, reset to the whole history.

const SVG = "http://www.w3.org/2000/svg";  // the SVG namespace name (an identifier, never fetched)
const LEFT = 86, RIGHT = 14, TOP = 6;
const DENSITY_H = 44, CAND_H = 20, ROW_H = 13, ROWS = 6, AXIS_H = 26, GAP = 8;
const MIN_SPAN = 1;  // ms

const SECOND = 1000, MINUTE = 60 * SECOND, HOUR = 60 * MINUTE, DAY = 24 * HOUR;
const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, SECOND, 2 * SECOND, 5 * SECOND, 15 * SECOND, 30 * SECOND, MINUTE,
  2 * MINUTE, 5 * MINUTE, 15 * MINUTE, 30 * MINUTE, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY,
  7 * DAY, 14 * DAY];

/** Milliseconds since the epoch of an ISO-8601 time as the API writes it (microseconds cut to ms). */
export function parseTs(text) {
  if (text === null || text === undefined) return NaN;
  return Date.parse(String(text).replace(/(\.\d{3})\d+/, "$1"));
}

function el(name, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.append(node);
  return node;
}

function pad(n, w = 2) { return String(n).padStart(w, "0"); }

function label(t, step) {
  const d = new Date(t);
  const ymd = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  const hm = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
  if (step < SECOND) return `${hm}:${pad(d.getUTCSeconds())}.${pad(d.getUTCMilliseconds(), 3)}`;
  if (step < MINUTE) return `${hm}:${pad(d.getUTCSeconds())}`;
  if (step < DAY) return `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${hm}`;
  if (step < 28 * DAY) return ymd;
  if (step < 365 * DAY) return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}`;
  return String(d.getUTCFullYear());
}

/** Tick times between t0 and t1, about ``count`` of them, on round UTC boundaries; and the step. */
export function ticks(t0, t1, count) {
  const span = Math.max(t1 - t0, 1);
  const want = span / Math.max(count, 1);
  const fixed = STEPS.find((s) => s >= want);
  if (fixed !== undefined) {
    const out = [];
    for (let t = Math.ceil(t0 / fixed) * fixed; t <= t1; t += fixed) out.push(t);
    return {times: out, step: fixed};
  }
  const months = [1, 2, 3, 6, 12, 24, 60, 120, 600, 1200].find((m) => m * 30 * DAY >= want) || 12000;
  const out = [];
  const d = new Date(t0);
  let y = d.getUTCFullYear(), m = Math.ceil(d.getUTCMonth() / months) * months;
  if (months >= 12) { y = Math.ceil(y / (months / 12)) * (months / 12); m = 0; }
  for (let t = Date.UTC(y, m, 1); t <= t1; m += months, t = Date.UTC(y, m, 1)) {
    if (t >= t0) out.push(t);
  }
  return {times: out, step: months * 30 * DAY};
}

export class Timeline {
  constructor(svg, {onMatch = () => {}, onView = () => {}} = {}) {
    this.svg = svg;
    this.onMatch = onMatch;
    this.onView = onView;
    this.data = null;
    this.view = null;
    this.selected = -1;
    this.brush = null;
    svg.addEventListener("wheel", (e) => this.wheel(e), {passive: false});
    svg.addEventListener("mousedown", (e) => this.down(e));
    window.addEventListener("mousemove", (e) => this.move(e));
    window.addEventListener("mouseup", (e) => this.up(e));
    svg.addEventListener("dblclick", () => this.reset());
    new ResizeObserver(() => this.render()).observe(svg);
  }

  /** start, end (ms); density {start, end, counts}; matchDensity (the same, of every match's first event);
   *  candidates [{start, end}]; matches [{start, end, title}];
   *  intervals [{start, end}] (answers that give places but no matches). */
  setData(data) {
    this.data = data;
    this.selected = -1;
    if (!this.view || !data || this.view[0] < data.start || this.view[1] > data.end) this.reset(false);
    this.render();
  }

  reset(draw = true) {
    this.view = this.data ? [this.data.start, Math.max(this.data.end, this.data.start + MIN_SPAN)] : null;
    if (draw) this.render();
  }

  select(i) { this.selected = i; this.render(); }

  width() { return this.svg.clientWidth || this.svg.getBoundingClientRect().width || 800; }

  x(t) { return LEFT + ((t - this.view[0]) / (this.view[1] - this.view[0])) * (this.width() - LEFT - RIGHT); }

  t(x) { return this.view[0] + ((x - LEFT) / (this.width() - LEFT - RIGHT)) * (this.view[1] - this.view[0]); }

  setView(t0, t1) {
    const {start, end} = this.data;
    const full = Math.max(end - start, MIN_SPAN);
    let span = Math.min(Math.max(t1 - t0, MIN_SPAN), full);
    let a = Math.max(start, Math.min(t0, end - span));
    if (span >= full) { a = start; span = full; }
    this.view = [a, a + span];
    this.render();
  }

  wheel(e) {
    if (!this.data) return;
    e.preventDefault();
    const at = this.t(this.local(e).x);
    const factor = e.deltaY > 0 ? 1.25 : 0.8;
    this.setView(at - (at - this.view[0]) * factor, at + (this.view[1] - at) * factor);
  }

  local(e) {
    const box = this.svg.getBoundingClientRect();
    return {x: e.clientX - box.left, y: e.clientY - box.top};
  }

  down(e) {
    if (!this.data || e.button !== 0 || e.target.classList.contains("match")) return;
    const {x} = this.local(e);
    if (x < LEFT) return;
    this.brush = {x0: x, x1: x};
    e.preventDefault();
  }

  move(e) {
    if (!this.brush) return;
    this.brush.x1 = Math.max(LEFT, Math.min(this.width() - RIGHT, this.local(e).x));
    this.render();
  }

  up() {
    if (!this.brush) return;
    const {x0, x1} = this.brush;
    this.brush = null;
    if (Math.abs(x1 - x0) > 4) this.setView(this.t(Math.min(x0, x1)), this.t(Math.max(x0, x1)));
    else this.render();
  }

  height() { return TOP + DENSITY_H + GAP + CAND_H + GAP + ROWS * ROW_H + GAP + AXIS_H; }

  render() {
    const svg = this.svg;
    svg.replaceChildren();
    const w = this.width();
    const h = this.height();
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    svg.style.height = `${h}px`;
    if (!this.data || !this.view) return;
    const plotW = w - LEFT - RIGHT;
    const clip = el("clipPath", {id: "plot-clip"}, el("defs", {}, svg));
    el("rect", {x: LEFT, y: 0, width: plotW, height: h}, clip);

    const yDensity = TOP, yCand = yDensity + DENSITY_H + GAP, yMatch = yCand + CAND_H + GAP;
    const yAxis = yMatch + ROWS * ROW_H + GAP;
    for (const [y, hh, text] of [[yDensity, DENSITY_H, "events"], [yCand, CAND_H, "candidates"],
      [yMatch, ROWS * ROW_H, "matches"]]) {
      el("rect", {x: LEFT, y, width: plotW, height: hh, class: "lane-bg"}, svg);
      el("text", {x: LEFT - 8, y: y + hh / 2 + 4, "text-anchor": "end", class: "lane-label"}, svg).textContent = text;
    }
    const {times, step} = ticks(this.view[0], this.view[1], Math.max(2, Math.floor(plotW / 110)));
    const axis = el("g", {class: "axis"}, svg);
    el("line", {x1: LEFT, x2: LEFT + plotW, y1: yAxis, y2: yAxis}, axis);
    for (const t of times) {
      const x = this.x(t);
      el("line", {x1: x, x2: x, y1: TOP, y2: yAxis, class: "grid"}, svg);
      el("line", {x1: x, x2: x, y1: yAxis, y2: yAxis + 4}, axis);
      if (x > LEFT + 24 && x < LEFT + plotW - 24) {  // clear of the "UTC" label and the right edge
        el("text", {x, y: yAxis + 16, "text-anchor": "middle"}, axis).textContent = label(t, step);
      }
    }
    el("text", {x: LEFT - 8, y: yAxis + 16, "text-anchor": "end"}, axis).textContent = "UTC";

    const plot = el("g", {"clip-path": "url(#plot-clip)"}, svg);
    this.drawDensity(plot, yDensity);
    this.drawCandidates(plot, yCand);
    // where every match lies (not only those drawn), under the drawn ones
    this.drawDensity(plot, yMatch, this.data.matchDensity, ROWS * ROW_H, "match-density", "matches");
    this.drawMatches(plot, yMatch);
    if (this.brush) {
      const a = Math.min(this.brush.x0, this.brush.x1);
      el("rect", {x: a, y: TOP, width: Math.abs(this.brush.x1 - this.brush.x0), height: yAxis - TOP,
        class: "brush"}, svg);
    }
    this.onView(this.view, this.view[0] <= this.data.start && this.view[1] >= this.data.end);
  }

  drawDensity(g, y, d = this.data.density, height = DENSITY_H, cls = "density", what = "events") {
    if (!d || !d.counts || !d.counts.length) return;
    const n = d.counts.length;
    const width = (d.end - d.start) / n || 1;
    let max = 0;
    const visible = [];
    for (let i = 0; i < n; i++) {
      const a = d.start + i * width, b = a + width;
      if (b < this.view[0] || a > this.view[1]) continue;
      visible.push([a, b, d.counts[i]]);
      max = Math.max(max, d.counts[i]);
    }
    if (!max) return;
    const path = [];
    for (const [a, b, c] of visible) {
      if (!c) continue;
      const x0 = this.x(a), x1 = Math.max(this.x(b), x0 + 0.5);
      const hh = Math.max(1, (c / max) * (height - 2));
      path.push(`M${x0.toFixed(1)},${(y + height).toFixed(1)}h${(x1 - x0).toFixed(2)}v${(-hh).toFixed(1)}h${(x0 - x1).toFixed(2)}z`);
    }
    el("path", {d: path.join(""), class: cls}, g).append(titled(`${what} per ${human(width)} (highest ${max.toLocaleString("en")})`));
  }

  drawCandidates(g, y) {
    // merged where they would overlap on screen, so thousands of candidates stay cheap to draw
    const spans = [];
    for (const c of this.data.candidates || []) {
      if (c.end < this.view[0] || c.start > this.view[1]) continue;
      const x0 = this.x(c.start), x1 = Math.max(this.x(c.end), x0 + 1.5);
      const last = spans[spans.length - 1];
      if (last && x0 <= last[1] + 0.5) { last[1] = Math.max(last[1], x1); last[2] += 1; } else spans.push([x0, x1, 1]);
    }
    for (const [x0, x1, n] of spans) {
      el("rect", {x: x0, y: y + 2, width: x1 - x0, height: CAND_H - 4, class: "candidate"}, g)
        .append(titled(`${n} candidate interval${n === 1 ? "" : "s"}`));
    }
  }

  drawMatches(g, y) {
    const rowsEnd = new Array(ROWS).fill(-Infinity);
    const place = (x0, x1) => {
      let row = rowsEnd.findIndex((end) => end + 1 < x0);
      if (row < 0) row = rowsEnd.indexOf(Math.min(...rowsEnd));
      rowsEnd[row] = Math.max(rowsEnd[row], x1);
      return row;
    };
    for (const iv of this.data.intervals || []) {
      const x0 = this.x(iv.start), x1 = Math.max(this.x(iv.end), x0 + 2);
      el("rect", {x: x0, y: y + 1, width: x1 - x0, height: ROWS * ROW_H - 2, class: "interval"}, g)
        .append(titled(iv.title || ""));
    }
    const order = (this.data.matches || []).map((m, i) => [m, i]).sort((a, b) => a[0].start - b[0].start);
    for (const [m, i] of order) {
      const x0 = this.x(m.start), x1 = Math.max(this.x(m.end), x0 + 3);
      const row = place(x0, x1);
      const rect = el("rect", {x: x0, y: y + row * ROW_H + 2, width: x1 - x0, height: ROW_H - 3,
        class: i === this.selected ? "match selected" : "match", "data-i": i, rx: 1.5}, g);
      rect.append(titled(m.title || ""));
      rect.addEventListener("click", (e) => { e.stopPropagation(); this.select(i); this.onMatch(i); });
    }
  }
}

function titled(text) {
  const t = document.createElementNS(SVG, "title");
  t.textContent = text;
  return t;
}

export function human(ms) {
  const units = [[365 * DAY, "year"], [30 * DAY, "month"], [7 * DAY, "week"], [DAY, "day"], [HOUR, "hour"],
    [MINUTE, "minute"], [SECOND, "second"]];
  for (const [size, name] of units) {
    if (ms >= size) {
      const v = ms / size;
      const r = v >= 10 ? Math.round(v) : Math.round(v * 10) / 10;
      return `${r} ${name}${r === 1 ? "" : "s"}`;
    }
  }
  return `${Math.round(ms)} ms`;
}
