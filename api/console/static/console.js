// The seqsketch web console: everything it shows comes from the public /v1 API of the server that served it.
// This module wires the page; its parts are shared.js (state, the API, helpers), datasets.js, answers.js,
// watch.js and jobs.js, beside the editor, the timeline and the summary charts.

import {strategyOf, withStrategy} from "/console/editor.js";
import {$, TOKEN_KEY, api, showTokenBox, state} from "/console/shared.js";
import {editor, runQuery, timeline} from "/console/answers.js";
import {loadDatasets, renderInfo} from "/console/datasets.js";
import {loadInputs, savedJobs, sendAppend, startBuild, watchJob} from "/console/jobs.js";
import {startWatch, stopWatch} from "/console/watch.js";

// --- health and token -------------------------------------------------------------------------------------

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

// --- wiring -----------------------------------------------------------------------------------------------

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
