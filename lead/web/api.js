// The lead's JSON API and its live channel (docs/phone-api.md). Every request the app makes and the live
// channel go through here (boot.js's first request is handed over; device.js renews the cookie): every
// request's headers come from headers(), the channel's address from channelUrl().
// It also knows whether the phone is offline or the lead out of reach, and keeps the last answer of each
// screen's reads so a page opened without the lead shows what was last loaded, marked as such.
import { S } from "./strings.js";
import "./device.js";  // globalThis.collieDevice: the keys in IndexedDB, and the cookie's renewal

export class Unpaired extends Error {}
export class Unreachable extends Error {}  // no answer came: the request may or may not have arrived
// The request was never sent: the phone is offline, or the lead is known out of reach or silent (then no
// write is tried: it would hang, or land later unseen). `nothing` and `notSent` say so in the user's words.
export class Offline extends Unreachable {
  constructor(phone) {
    super(phone ? "the phone is offline" : "the lead is not answering");
    this.nothing = phone ? S.nothingDoneOffline : S.nothingDoneNoLead;
    this.notSent = phone ? S.notSentOffline : S.notSentNoLead;
  }
}

// The device key (issue 25.1): the pairing page keeps it in this origin's IndexedDB ("collie", store
// "device", key "key"); every request carries it, with the cookie, as X-Collie-Device-Key. Browsers send
// the cookie to every port of the host, but another origin cannot read this origin's IndexedDB.
let deviceKey = null;
const { stored } = globalThis.collieDevice;
const early = globalThis.collieEarly || {};  // boot.js: the key read and the first screen's reads asked for first
const earlyReads = early.reads || {};
deviceKey = early.key || null;
const readKey = () => deviceKey || (deviceKey = stored("key").then((k) => k || ""));

// A neighbour on another port of the host can replace the cookie (same name and Path): the page then
// renews it with the signing key the pairing page made, which script can use here but never read out
// (docs/threat-model.md). One renewal at a time; false when this phone must pair again. A neighbour that
// replaces it again and again (a tab doing so every few ms) is met by renewing again: RENEWALS times a request.
const RENEWALS = 8;
let renewing = null;
function renew() {
  return renewing || (renewing = readKey().then((key) => globalThis.collieDevice.renew(key))
    .finally(() => setTimeout(() => { renewing = null; }, 0)));
}

// Every request's headers, in one place (a write carries the CSRF header the lead requires).
function headers(method, json, key) {
  const out = {};
  if (json) out["Content-Type"] = "application/json";
  if (method !== "GET") out["X-Collie-CSRF"] = "1";
  if (key) out["X-Collie-Device-Key"] = key;
  return out;
}

// ---- reachability: the phone offline, the lead out of reach or silent, or fine -------------------------
// The lead's live channel carries a `beat` every 2 s (docs/phone-api.md): no byte on it for SILENT ms means
// the lead is not answering — hung, its machine asleep, the network black-holed — though its connection
// stands. Within 5 s the banner (fixed under the header on every screen) says so and counts the seconds;
// what waits for an answer meanwhile is given up (a write then says it may not have arrived), and every
// write tapped while the lead is silent or out of reach is not sent at all, and says so.
// The lead beats every 2 s only while the user is using the page (a tap, a key, a scroll in the last
// minute: it tells the lead so with its view), else every 25 s (issue 39: a page nobody touches costs the
// phone's radio at most 144 small writes an hour). So silence means 4 s of none while in use (counted from
// when use began, as the lead may not have heard yet), 30 s on an idle page.
// The count starts again when the lead answers the page's telling that the user is using it (state.js
// pushView): a telling that waited behind another, or that a busy lead answered late, is no silence.
const SILENT = 4000, SILENT_IDLE = 30000, ACTIVE_MS = 60000;
export const net = { leadDown: false, staleAt: null, listeners: [], heardAt: null, silentSince: null };
let touchedAt = 0, activeFrom = null, toldActiveAt = 0;
export function leadHeardActive() { toldActiveAt = Date.now(); }
const activity = [];
export const userActive = () => Date.now() - touchedAt < ACTIVE_MS;
export function onActivity(fn) { activity.push(fn); }
function touched() {
  const was = userActive();
  touchedAt = Date.now();
  if (!was) { activeFrom = touchedAt; for (const fn of activity) fn(); }
}
for (const kind of ["pointerdown", "keydown", "scroll", "wheel", "touchstart"]) {
  addEventListener(kind, touched, { capture: true, passive: true });
}
setInterval(() => {
  if (activeFrom !== null && !userActive()) { activeFrom = null; for (const fn of activity) fn(); }
}, 5000);
export function connectivity() {
  if (navigator.onLine === false) return S.offline;
  if (net.leadDown) return S.leadDown;
  if (net.silentSince) return S.leadSilent(Math.floor((Date.now() - net.silentSince) / 1000));
  if (net.staleAt) return S.lastLoaded(new Date(net.staleAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" }));
  return "";
}
const tell = () => { for (const fn of net.listeners) fn(); };
function setLead(down) {
  const was = connectivity();
  net.leadDown = down;
  if (!down) net.staleAt = null;
  if (connectivity() !== was) tell();
}
export function phoneChanged() { tell(); if (navigator.onLine) probe(); }
export const leadOut = () => net.leadDown || net.silentSince !== null;
function heard() {
  net.heardAt = Date.now();
  if (net.silentSince !== null) { net.silentSince = null; tell(); }
}
const waiting = new Set();  // AbortControllers of the requests on their way
setInterval(() => {
  if (!es || net.heardAt === null || document.hidden) return;
  const since = userActive() && activeFrom !== null ? Math.max(net.heardAt, activeFrom, toldActiveAt) : net.heardAt;
  const quiet = Date.now() - since;
  if (quiet < (userActive() ? SILENT : SILENT_IDLE)) return;
  if (net.silentSince === null) {
    net.silentSince = since;
    for (const c of waiting) c.abort();  // no answer will come while it is silent
  }
  tell();  // the banner counts the seconds
}, 500);

// ---- the last answer of each read, for a page opened without the lead (bounded) ------------------------
const KEEP = /^\/api\/(dashboard|needs|agents\/[^?]+\/(conversations(\/[^/?]+(\/items(\?(limit|newest)=\d+)?)?)?|inbox|starters))(\?closed=1)?$/;
// What a read answered from the kept copy is marked so: the chat reads it again once the lead answers.
export const STALE = Symbol("stale");
const KEEP_MAX = 256 * 1024;
function remember(path, text) {
  if (!KEEP.test(path) || text.length > KEEP_MAX) return;
  try { localStorage.setItem("last:" + path, JSON.stringify({ at: Date.now(), text })); } catch (_) { /* full: keep none */ }
}
function recall(path) {
  try { const got = JSON.parse(localStorage.getItem("last:" + path)); return got && { at: got.at, data: JSON.parse(got.text) }; }
  catch (_) { return null; }
}

export async function api(path, { method = "GET", body, anyway = false } = {}, again = RENEWALS) {
  let r, text;
  if (method !== "GET" && navigator.onLine === false) throw new Offline(true);
  if (method !== "GET" && !anyway && net.silentSince !== null) throw new Offline(false);
  if (method !== "GET" && !anyway && net.leadDown) {  // is it back? else nothing is sent
    await probe();
    if (leadOut()) throw new Offline(false);
  }
  const stop = new AbortController();
  waiting.add(stop);
  try {
    const key = await readKey();
    const first = method === "GET" && again === RENEWALS ? earlyReads[path] : null;
    delete earlyReads[path];  // boot.js's request answers the first read of its path only
    // a read is kept by the browser and asked again each time with its ETag: an unchanged one is a 304 (issue 39)
    r = first ? await first : await fetch(path, { method, credentials: "same-origin", cache: method === "GET" ? "no-cache" : "no-store",
      headers: headers(method, body !== undefined, key), signal: stop.signal,
      body: body !== undefined ? JSON.stringify(body) : undefined });
    text = await r.text();
    if (method === "GET") tags.set(path, (r.headers.get("ETag") || "").replace(/^W\//, "").replace(/"/g, "").replace(/-gz$/, ""));
  } catch (e) {
    if (!stop.signal.aborted) setLead(navigator.onLine !== false);
    if (method !== "GET" && net.leadDown) setTimeout(probe, 0);  // is it back? (writes wait until it is)
    const last = method === "GET" ? recall(path) : null;
    if (last) {
      net.staleAt = net.staleAt ? Math.min(net.staleAt, last.at) : last.at; tell();
      if (last.data && typeof last.data === "object") last.data[STALE] = last.at;
      return last.data;
    }
    throw new Unreachable(String(e));
  } finally { waiting.delete(stop); }
  if (r.status === 401) {
    // renew() is true, false (pair again) or null (it did not reach the lead: try again, within the bound)
    if (again > 0 && await renew() !== false) return api(path, { method, body, anyway }, again - 1);  // the same request again
    deviceKey = null; throw new Unpaired();
  }
  if (r.status >= 502 && r.status <= 504) { setLead(true); throw new Unreachable(`HTTP ${r.status}`); }
  setLead(false);
  let data = null;
  try { data = JSON.parse(text); } catch (_) { data = null; }
  if (!r.ok && !data) throw new Error(`HTTP ${r.status}`);
  if (r.ok && method === "GET") remember(path, text);
  return data;
}
export const write = (path, body) => api(path, { method: "POST", body });
// path -> the tag of the last answer read (its ETag bar the coding): the live channel is told the dashboard's
export const tags = new Map();
// Is the lead there? (asked when the live channel drops, so the page says so within seconds)
async function probe() { try { await api("/api/needs"); } catch (_) { /* api() noted it */ } }

// ---- the live channel ------------------------------------------------------------------------------
// EventSource sends no headers: a ticket fetched with the device key opens the channel (issue 25.1).
// `held` says what the page holds already (issue 39): `have`, the tag of the dashboard it read (the snapshot
// then leaves it out), `items_since`, the revision it holds the viewed chat's items up to; and after a
// pause, `last_event_id`: the lead replays what the page missed instead of a whole snapshot.
function channelUrl(view, ticket, held) {
  const q = new URLSearchParams();
  if (view) {
    q.set("machine", view.machine); q.set("agent", view.agent);
    if (view.conversation) q.set("conversation", view.conversation);
  }
  for (const [k, v] of Object.entries(held || {})) if (v !== null && v !== undefined && v !== "") q.set(k, String(v));
  if (ticket) q.set("ticket", ticket);
  const text = q.toString();
  return "/api/events" + (text ? "?" + text : "");
}
let es = null, lastId = null, asleep = false, again = null;
// Open the channel (once) and hand each named event's JSON to its handler in `on`.
export function connect(view, on, held = () => ({})) {
  connect.args = [view, on, held];
  if (es || asleep) return;
  const pending = es = { close() { this.closed = true; }, pending: true };
  // the ticket is asked for even while the lead is silent or out of reach: the channel is how the page hears it is back
  api("/api/events/ticket", { method: "POST", body: {}, anyway: true }).then((t) => {
    if (es === pending && !pending.closed) open(view, on, t && t.ticket, held);
  }, (e) => {
    if (es !== pending) return;
    es = null;
    if (e instanceof Unpaired) on.unauthorized(); else later(() => connect(view, on, held));
  });
}
function later(fn) { clearTimeout(again); again = setTimeout(fn, 2000); }
function open(view, on, ticket, held) {
  const opened = view();
  const src = es = new EventSource(channelUrl(opened, ticket, { ...held(), last_event_id: lastId }));
  net.heardAt = Date.now();
  for (const [name, fn] of Object.entries(on)) {
    if (name === "unauthorized") continue;
    src.addEventListener(name, (e) => {
      heard();
      if (e.lastEventId) lastId = e.lastEventId;
      const data = JSON.parse(e.data);
      if (name === "hello") data.opened = opened;  // the view the lead was told in the address
      fn(data);
    });
  }
  src.addEventListener("beat", heard);
  src.addEventListener("open", () => { heard(); setLead(false); });
  src.addEventListener("unauthorized", () => { src.close(); es = null; on.unauthorized(); });
  src.onerror = () => {
    probe();
    if (src.readyState === EventSource.CLOSED) { es = null; later(() => connect(view, on, held)); }
  };
}
// Issue 39: a hidden page closes its channel (no write reaches a phone in a pocket; a push wakes it), and a
// page shown again opens it from the last event it had: the lead replays what it missed.
export function sleep() {
  asleep = true; clearTimeout(again);
  if (es) es.close();
  es = null;
}
export function wake() {
  if (!asleep) return;
  asleep = false;
  if (connect.args) connect(...connect.args);
}
export const channelOpen = () => es !== null && !es.pending;
// Tell the lead what this page views (its agent is then polled every 2 s, and the chat gets its items live).
export const tellView = (channel, view) => write(`/api/events/${encodeURIComponent(channel)}/view`, view || {});
