// The datasets: listed, one selected, and described (its facts and its types).

import {typeLiteral} from "/console/editor.js";
import {$, api, bytes, fmt, h, state, when} from "/console/shared.js";
import {clearAnswer, drawTimeline, editor} from "/console/answers.js";

export async function loadDatasets() {
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

export async function selectDataset(name) {
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

export function exampleQuery(info) {
  const types = Object.entries(info.types || {}).sort((a, b) => b[1] - a[1]).map(([t]) => t);
  if (!types.length) return "";
  const a = typeLiteral(types[0]), b = typeLiteral(types[1] || types[0]);
  const partition = info.attrs && "case" in info.attrs ? " PARTITION BY case" : "";
  return `PATTERN SEQ(${a} a, ${b} b)${partition} WITHIN 1 day`;
}

export function renderInfo() {
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
