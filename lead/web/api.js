// The lead's JSON API and its live channel (docs/phone-api.md). The only module that calls fetch or opens
// the live channel: every request's headers come from headers(), the channel's address from channelUrl().
import { S } from "./strings.js";
import { banner } from "./dom.js";

export class Unpaired extends Error {}

// Every request's headers, in one place (a write carries the CSRF header the lead requires).
function headers(method, json) {
  const out = {};
  if (json) out["Content-Type"] = "application/json";
  if (method !== "GET") out["X-Collie-CSRF"] = "1";
  return out;
}

export async function api(path, { method = "GET", body } = {}) {
  let r;
  try {
    r = await fetch(path, { method, credentials: "same-origin", cache: "no-store",
      headers: headers(method, body !== undefined),
      body: body !== undefined ? JSON.stringify(body) : undefined });
  } catch (e) { banner(S.offline); throw e; }
  banner(navigator.onLine === false ? S.offline : "");
  if (r.status === 401) throw new Unpaired();
  let data = null;
  try { data = await r.json(); } catch (_) { data = null; }
  if (!r.ok && !data) throw new Error(`HTTP ${r.status}`);
  return data;
}
export const write = (path, body) => api(path, { method: "POST", body });

// ---- the live channel ------------------------------------------------------------------------------
function channelUrl(view) {
  if (!view) return "/api/events";
  const q = new URLSearchParams({ machine: view.machine, agent: view.agent });
  if (view.conversation) q.set("conversation", view.conversation);
  return "/api/events?" + q.toString();
}
let es = null;
// Open the channel (once) and hand each named event's JSON to its handler in `on`.
export function connect(view, on) {
  if (es) return;
  const src = es = new EventSource(channelUrl(view()));
  for (const [name, fn] of Object.entries(on)) {
    if (name === "unauthorized") continue;
    src.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  }
  src.addEventListener("unauthorized", () => { src.close(); es = null; on.unauthorized(); });
  src.onerror = () => { if (src.readyState === EventSource.CLOSED) { es = null; setTimeout(() => connect(view, on), 2000); } };
}
// Tell the lead what this page views (its agent is then polled every 2 s, and the chat gets its items live).
export const tellView = (channel, view) => write(`/api/events/${encodeURIComponent(channel)}/view`, view || {});
