// What every part of the console shares: the page's state, its one door to the server (the public /v1 API),
// and the helpers that make elements and format numbers, times and sizes.

export const TOKEN_KEY = "seqsketch.token";
export const $ = (id) => document.getElementById(id);
export const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en"));

export const state = {
  health: null, datasets: [], selected: null, info: null, density: null, answer: null, candidates: null,
  query: "", mode: "verified", events: new Map(), typesShown: 12, running: false,
};

export class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
    this.position = error && error.position;
  }
}

export async function api(path, {method = "GET", body = undefined, contentType = "application/json"} = {}) {
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

export function h(tag, attrs = {}, ...children) {
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

export function showTokenBox(needed) {
  $("token-box").hidden = !(needed || (state.health && state.health.auth === "tokens"));
}

export function when(iso) {
  return iso ? String(iso).replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace("+00:00", " UTC") : "–";
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n), u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
  return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
}
