// The query editor: a textarea over a highlighted copy of its text, completions from the language and the
// selected dataset's types and attributes, and the API's error position underlined.

export const KEYWORDS = ["PATTERN", "SEQ", "AND", "OR", "NOT", "ANY", "WHERE", "PREV", "TRUE", "FALSE", "NULL",
  "PARTITION", "BY", "WITHIN", "EVENTS", "EVENT", "BETWEEN", "STRATEGY", "RETURN"];
export const STRATEGIES = ["skip_till_next_match", "skip_till_any_match", "robust_skip_till_next_match",
  "strict_contiguity", "partition_contiguity"];
export const RETURNS = ["matches", "intervals", "exists", "count", "cases"];
export const UNITS = ["ms", "s", "sec", "min", "h", "hour", "hours", "d", "day", "days"];
const KEYWORD_SET = new Set(KEYWORDS);
const VALUE_SET = new Set([...STRATEGIES, ...RETURNS]);
const IDENT = /^[A-Za-z_][A-Za-z0-9_:]*$/;
// one token per match: comment, string (maybe unclosed), number, name, space, operator, any other character
const TOKEN = /(--[^\n]*)|('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?)|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_:]*)|(\s+)|(!=|<>|<=|>=|==|[=<>])|([\s\S])/gy;

/** The tokens of ``text``: {kind, text, start, end}; kinds: com, str, num, name, space, op, punct. */
export function tokenize(text) {
  const out = [];
  TOKEN.lastIndex = 0;
  let m;
  while (TOKEN.lastIndex < text.length && (m = TOKEN.exec(text)) !== null) {
    const kind = m[1] ? "com" : m[2] ? "str" : m[3] ? "num" : m[4] ? "name" : m[5] ? "space" : m[6] ? "op"
      : "punct";
    out.push({kind, text: m[0], start: m.index, end: m.index + m[0].length});
  }
  return out;
}

/** A type name as the query language writes it: bare when it is a name, else quoted. */
export function typeLiteral(name) {
  return IDENT.test(name) && !KEYWORD_SET.has(name.toUpperCase()) ? name : `'${name.replace(/(['\\])/g, "\\$1")}'`;
}

/** The character offset of a 1-based line and column in ``text``. */
export function offsetOf(text, line, column) {
  let offset = 0;
  for (let i = 1; i < line; i++) {
    const next = text.indexOf("\n", offset);
    if (next < 0) return text.length;
    offset = next + 1;
  }
  return Math.min(text.length, offset + Math.max(0, (column || 1) - 1));
}

export class QueryEditor {
  constructor(textarea, highlight, list) {
    this.ta = textarea;
    this.pre = highlight;
    this.list = list;
    this.types = new Map();  // type name → events
    this.attrs = [];
    this.error = null;       // {line, column}
    this.items = [];
    this.active = 0;
    this.onRun = () => {};
    this.onChange = () => {};
    this.ta.addEventListener("input", () => { this.error = null; this.render(); this.complete(false); this.onChange(); });
    this.ta.addEventListener("scroll", () => { this.pre.scrollTop = this.ta.scrollTop; this.hideList(); });
    this.ta.addEventListener("keydown", (e) => this.key(e));
    this.ta.addEventListener("blur", () => setTimeout(() => this.hideList(), 150));
    this.ta.addEventListener("click", () => this.hideList());
    this.list.addEventListener("mousedown", (e) => {
      const li = e.target.closest("li");
      if (li) { e.preventDefault(); this.accept(Number(li.dataset.i)); }
    });
    new ResizeObserver(() => { this.pre.style.height = `${this.ta.offsetHeight}px`; }).observe(this.ta);
    this.render();
  }

  get value() { return this.ta.value; }
  set value(text) { this.ta.value = text; this.error = null; this.render(); this.onChange(); }

  /** The selected dataset's vocabulary: type name → count, attribute name → its stored type. */
  setVocabulary(types, attrs) {
    this.types = new Map(Object.entries(types || {}));
    this.attrs = Object.entries(attrs || {});
    this.render();
  }

  /** Underline the token at the API's error position (1-based line and column), or clear with null. */
  setError(position) {
    this.error = position && position.line ? position : null;
    this.render();
  }

  render() {
    const text = this.ta.value;
    const tokens = tokenize(text);
    const at = this.error ? offsetOf(text, this.error.line, this.error.column) : -1;
    const frag = document.createDocumentFragment();
    let marked = false;
    let prev = null;  // the previous token that is not space or comment
    for (const tok of tokens) {
      const span = document.createElement("span");
      span.textContent = tok.text;
      const cls = this.classOf(tok, prev);
      if (cls) span.className = cls;
      if (!marked && at >= tok.start && at < tok.end && tok.kind !== "space") {
        this.markError(span);
        marked = true;
      } else if (!marked && at >= tok.start && at < tok.end) {
        // the error points at space: underline what follows it, or the end
        const rest = tokens.find((t) => t.start >= tok.end && t.kind !== "space");
        if (!rest) { frag.append(span); this.appendEol(frag); marked = true; continue; }
      }
      frag.append(span);
      if (tok.kind !== "space" && tok.kind !== "com") prev = tok;
    }
    if (!marked && at >= 0) {
      const next = Array.from(frag.childNodes).find((n, i) => tokens[i] && tokens[i].start >= at && tokens[i].kind !== "space");
      if (next) this.markError(next); else this.appendEol(frag);
    }
    frag.append(document.createTextNode("\n"));  // a trailing newline in the textarea takes a line here too
    this.pre.replaceChildren(frag);
    this.pre.scrollTop = this.ta.scrollTop;
  }

  markError(span) {
    span.classList.add("err");
    span.dataset.line = String(this.error.line);
    span.dataset.column = String(this.error.column);
  }

  appendEol(frag) {
    const span = document.createElement("span");
    span.className = "err err-eol";
    span.dataset.line = String(this.error.line);
    span.dataset.column = String(this.error.column);
    frag.append(span);
  }

  classOf(tok, prev) {
    if (tok.kind === "com") return "tok-com";
    if (tok.kind === "str") return this.types.has(unquote(tok.text)) && !(prev && prev.text === ".") ? "tok-type tok-str" : "tok-str";
    if (tok.kind === "num") return "tok-num";
    if (tok.kind === "op") return "tok-op";
    if (tok.kind !== "name") return "";
    const upper = tok.text.toUpperCase();
    if (prev && prev.text === ".") return "tok-attr";
    if (KEYWORD_SET.has(upper)) return "tok-kw";
    if (VALUE_SET.has(tok.text.toLowerCase()) && prev && /^(STRATEGY|RETURN)$/i.test(prev.text)) return "tok-val";
    if (this.types.has(tok.text)) return "tok-type";
    return "";
  }

  // --- completion -----------------------------------------------------------------------------------------

  /** The word being typed before the caret and what may complete it. */
  context() {
    const caret = this.ta.selectionStart;
    const before = this.ta.value.slice(0, caret);
    const end = tokenize(before).pop();
    const typing = end && end.end === before.length && (end.kind === "name" || (end.kind === "str" && !closed(end.text)));
    const prefix = typing ? end.text : "";
    const start = caret - prefix.length;
    const tokens = tokenize(before.slice(0, start)).filter((t) => t.kind !== "space" && t.kind !== "com");
    const last = tokens[tokens.length - 1];
    const second = tokens[tokens.length - 2];
    let options;
    if (last && /^STRATEGY$/i.test(last.text)) options = STRATEGIES.map((s) => [s, "strategy"]);
    else if (last && /^RETURN$/i.test(last.text)) options = RETURNS.map((s) => [s, "returns"]);
    else if (last && last.text === ".") options = this.attrs.map(([a, type]) => [a, `attribute: ${type}`]);
    else if (last && /^BY$/i.test(last.text)) options = this.attrs.map(([a, type]) => [a, `attribute: ${type}`]);
    else if (last && last.kind === "num" && second && /^WITHIN$/i.test(second.text)) {
      options = [...UNITS, "EVENTS"].map((u) => [u, u === "EVENTS" ? "keyword" : "unit"]);
    } else {
      const types = [...this.types.entries()].sort((a, b) => b[1] - a[1])
        .map(([t, n]) => [typeLiteral(t), `${n.toLocaleString("en")} events`]);
      options = [...types, ...KEYWORDS.map((k) => [k, "keyword"])];
    }
    const quoted = /^['"]/.test(prefix);
    const needle = (quoted ? prefix.slice(1) : prefix).toLowerCase();
    const items = options.filter(([text]) => {
      const bare = /^['"]/.test(text) ? text.slice(1) : text;
      const hay = bare.toLowerCase();
      return hay.startsWith(needle) && text !== prefix && (!quoted || /^['"]/.test(text) || needle === "");
    });
    return {start, prefix, items: items.slice(0, 40)};
  }

  complete(forced) {
    const ctx = this.context();
    if ((!ctx.prefix && !forced) || ctx.items.length === 0) { this.hideList(); return; }
    this.ctx = ctx;
    this.items = ctx.items;
    this.active = 0;
    const lis = this.items.map(([text, note], i) => {
      const li = document.createElement("li");
      li.dataset.i = String(i);
      li.setAttribute("role", "option");
      const code = document.createElement("span");
      code.textContent = text;
      const small = document.createElement("small");
      small.textContent = note;
      li.append(code, small);
      if (i === 0) li.className = "active";
      return li;
    });
    this.list.replaceChildren(...lis);
    this.place();
    this.list.hidden = false;
  }

  place() {
    const style = getComputedStyle(this.ta);
    const probe = document.createElement("span");
    probe.textContent = "MMMMMMMMMM";
    probe.style.font = style.font;
    probe.style.visibility = "hidden";
    probe.style.position = "absolute";
    document.body.append(probe);
    const charWidth = probe.getBoundingClientRect().width / 10;
    probe.remove();
    const before = this.ta.value.slice(0, this.ctx.start);
    const lines = before.split("\n");
    const lineHeight = parseFloat(style.lineHeight) || 20;
    const left = parseFloat(style.paddingLeft) + lines[lines.length - 1].length * charWidth;
    const top = parseFloat(style.paddingTop) + lines.length * lineHeight - this.ta.scrollTop + 2;
    this.list.style.left = `${Math.min(left, this.ta.clientWidth - 220)}px`;
    this.list.style.top = `${top}px`;
  }

  hideList() { this.list.hidden = true; this.items = []; }

  accept(i) {
    const [text] = this.items[i];
    const {start, prefix} = this.ctx;
    const value = this.ta.value;
    let end = start + prefix.length;
    if (/^['"]/.test(prefix) && value[end] === prefix[0]) end += 1;  // the closing quote typed already
    this.ta.value = value.slice(0, start) + text + value.slice(end);
    const caret = start + text.length;
    this.ta.setSelectionRange(caret, caret);
    this.hideList();
    this.error = null;
    this.render();
    this.onChange();
    this.ta.focus();
  }

  key(e) {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.hideList(); this.onRun(); return; }
    if (e.key === " " && e.ctrlKey) { e.preventDefault(); this.complete(true); return; }
    if (this.list.hidden) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      const n = this.items.length;
      this.active = (this.active + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
      this.list.querySelectorAll("li").forEach((li, i) => li.classList.toggle("active", i === this.active));
      this.list.children[this.active].scrollIntoView({block: "nearest"});
    } else if (e.key === "Enter" || e.key === "Tab") {
      e.preventDefault();
      this.accept(this.active);
    } else if (e.key === "Escape") {
      e.preventDefault();
      this.hideList();
    }
  }
}

/** Has the string token ``text`` its closing quote (not an escaped one)? */
function closed(text) {
  if (text.length < 2 || text[text.length - 1] !== text[0]) return false;
  const slashes = /\\*$/.exec(text.slice(1, -1))[0].length;
  return slashes % 2 === 0;
}

function unquote(text) {
  return text.length >= 2 ? text.slice(1, -1).replace(/\\(.)/g, "$1") : text;
}

/** The query with its STRATEGY clause set to ``strategy`` (added before RETURN, or at the end). */
export function withStrategy(text, strategy) {
  const clause = /\bSTRATEGY\s+[A-Za-z_]+/i;
  if (clause.test(text)) return text.replace(clause, `STRATEGY ${strategy}`);
  const ret = /\bRETURN\s+[A-Za-z_]+\s*$/i.exec(text);
  if (ret) return `${text.slice(0, ret.index)}STRATEGY ${strategy} ${text.slice(ret.index)}`;
  return `${text.replace(/\s+$/, "")} STRATEGY ${strategy}`;
}

/** The strategy the query names, or the default. */
export function strategyOf(text) {
  const m = /\bSTRATEGY\s+([A-Za-z_]+)/i.exec(text);
  return m && STRATEGIES.includes(m[1].toLowerCase()) ? m[1].toLowerCase() : "skip_till_next_match";
}

/** The attributes of ``PARTITION BY``, if any. */
export function partitionOf(text) {
  const m = /\bPARTITION\s+BY\s+([^\n]*?)(?=\s+(?:WITHIN|BETWEEN|STRATEGY|RETURN)\b|$)/i.exec(text);
  return m ? m[1].split(",").map((a) => a.trim().replace(/^['"]|['"]$/g, "")).filter(Boolean) : [];
}
