// A watch: the query kept standing, its new matches added to the answer as soon as they are certain.

import {$, TOKEN_KEY, api, fmt, state} from "/console/shared.js";
import {renderAnswer} from "/console/answers.js";

export async function startWatch() {
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

export function addLiveMatch(match) {
  if (!state.answer || !state.watch) return;
  state.answer.matches = [...(state.answer.matches || []), match];
  if (typeof state.answer.count === "number") state.answer.count += 1;
  state.watch.added += 1;
  $("watch-state").textContent = `watching: ${fmt(state.watch.added)} new match(es) added`;
  renderAnswer();
}

export async function stopWatch() {
  const watch = state.watch;
  state.watch = null;
  if (!watch) return;
  watch.controller.abort();
  try { await api(`/datasets/${encodeURIComponent(watch.name)}/watches/${watch.id}`, {method: "DELETE"}); } catch { /* gone */ }
  $("watch-state").textContent = "";
}
