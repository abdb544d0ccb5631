// Builds and appends: the server's inputs, build jobs followed to their end, events appended from the page.

import {human} from "/console/timeline.js";
import {$, api, fmt, h, state} from "/console/shared.js";
import {loadDatasets, selectDataset} from "/console/datasets.js";

const JOBS_KEY = "seqsketch.jobs";

export async function loadInputs() {
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

export function savedJobs() {
  try { return JSON.parse(sessionStorage.getItem(JOBS_KEY) || "[]"); } catch { return []; }
}

export async function startBuild() {
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

export async function watchJob(id) {
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

export function renderJob(li, job) {
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

export async function sendAppend() {
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
