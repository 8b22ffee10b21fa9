// Collie's service worker: the app shell opens offline (and says so); the API is never cached.
// The shell's files are served under /v/<VERSION>/ (lead/web.py writes VERSION in when it serves this file):
// immutable names, so they are read from this cache first; the page itself is asked for first from the network.
const VERSION = "dev";
const SHELL = `collie-shell-${VERSION}`;
const MODULES = ["device", "app", "api", "state", "dom", "dashboard", "agent", "chat", "askcard", "items", "icons", "inbox",
  "newconv", "push", "strings"];
const FILES = ["/", ...MODULES.map((m) => `/v/${VERSION}/${m}.js`), `/v/${VERSION}/app.css`,
  `/v/${VERSION}/manifest.webmanifest`, "/icon.svg"];
self.addEventListener("install", (e) => { e.waitUntil(caches.open(SHELL).then((c) => c.addAll(FILES))); self.skipWaiting(); });
self.addEventListener("activate", (e) => {
  e.waitUntil(caches.keys().then((keys) => Promise.all(keys.filter((k) => k !== SHELL).map((k) => caches.delete(k)))));
  self.clients.claim();
});
self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== "GET" || url.origin !== location.origin || url.pathname.startsWith("/api/")) return;
  const path = url.pathname === "/index.html" ? "/" : url.pathname;
  if (!FILES.includes(path)) return;
  if (path.startsWith("/v/")) {  // immutable: the cache, else the network
    e.respondWith(caches.match(path).then((hit) => hit || fetch(e.request)));
    return;
  }
  // network first, so a new release shows at once; the cached shell when the lead is out of reach
  e.respondWith(fetch(e.request).then((r) => {
    const copy = r.clone();
    if (r.ok) caches.open(SHELL).then((c) => c.put(path, copy));
    return r;
  }).catch(() => caches.match(path)));
});

// The device key the pairing page kept in this origin's IndexedDB (issue 25.1), for the worker's own requests,
// and the renewal of a cookie a neighbour replaced (device.js, shared with the page)
importScripts(`/v/${VERSION}/device.js`);
const readKey = () => collieDevice.stored("key").then((k) => k || "");
const renewCookie = () => readKey().then((k) => collieDevice.renew(k));
// A request with the device key; a 401 (the door let nothing through) renews the cookie and asks once more
async function keyed(path, init = {}) {
  const go = async () => fetch(path, { credentials: "same-origin", cache: "no-store", ...init,
    headers: { ...(init.headers || {}), ...(await readKey().then((k) => (k ? { "X-Collie-Device-Key": k } : {}))) } });
  const r = await go();
  return r.status === 401 && await renewCookie() ? go() : r;
}

// Collie's words on a notification (features Q4, O; issue 31). strings.js is an ES module and this is a
// classic worker (registered without {type: "module"}), so the few it needs are here.
const WORDS = { allow: "Allow", deny: "Deny", allowed: "Allowed", denied: "Denied", retry: "Retry",
  notCertain: "Not certain the answer arrived. Retry sends it once more.",  // O
  refused: "The answer was refused." };                                     // O
const CSRF = { "X-Collie-CSRF": "1" };
const ANSWER_MS = 30000;  // an answer's reply waited for at most (then: not certain, Retry)

// Push (features P2, P3): show the ask's notification; tapping it opens that ask's card. A push for an
// ask that was answered meanwhile (on another device, or in the agent) is not shown, and the notifications
// of asks no longer open are closed (issue 31: never a stale Allow). A permission ask the lead judged
// answerable with one tap (its payload names the digest and the allow and deny option ids: Q5, Q6, T6)
// gets the actions `Allow` and `Deny`. A turn's end (issue 37: `Done in`, `Stopped in`, `Failed in`; tag
// per conversation, so a later turn replaces it) and a fold (`N turns ended on <agent>`) show as they come;
// tapping one opens its chat, at its newest item.
self.addEventListener("push", (e) => {
  let d;
  try { d = e.data.json(); } catch (_) { d = { title: "Collie", body: e.data ? e.data.text() : "" }; }
  e.waitUntil((async () => {
    if (d.kind === "ask" && d.ask) {
      try {
        const asked = Date.now();
        const r = await keyed("/api/needs");
        if (r.ok) {
          const asks = (await r.json()).asks;
          await closeAnswered(new Set(asks.map((a) => `ask:${a.machine}/${a.agent}/${a.ask}`)), asked);
          const open = asks.some((a) => a.machine === d.ask.machine && a.agent === d.ask.agent && a.ask === d.ask.id);
          if (!open) return;
        }
      } catch (_) { /* offline: show it */ }
    }
    const a = d.kind === "ask" && d.ask && d.ask.digest && d.ask.allow && d.ask.deny ? d.ask : null;
    await self.registration.showNotification(d.title || "Collie", { body: d.body || "", tag: d.tag,
      data: { url: d.url || "/", ask: a }, icon: "/icon.svg", renotify: ["many", "turn", "turns"].includes(d.kind),
      actions: a ? [{ action: "allow", title: WORDS.allow }, { action: "deny", title: WORDS.deny }] : [] });
  })());
});
// an ask notification shown before `asked` whose ask is not in the Needs you list read since
async function closeAnswered(open, asked) {
  for (const n of await self.registration.getNotifications()) {
    if (n.tag && n.tag.startsWith("ask:") && !open.has(n.tag) && n.timestamp < asked) n.close();
  }
}
self.addEventListener("notificationclick", (e) => {
  const n = e.notification;
  const ask = n.data && n.data.ask;
  if (ask && (e.action === "allow" || e.action === "deny" || e.action === "retry")) {
    e.waitUntil(answerFrom(n, e.action));
    return;
  }
  n.close();
  const url = (n.data && n.data.url) || "/";
  e.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((wins) => {
    for (const w of wins) { if ("focus" in w) { w.navigate(url); return w.focus(); } }
    return self.clients.openWindow(url);
  }));
});

// Answer from the notification (issue 31; B5, O): POST /api/ask/<id> with the digest the notification
// showed, so a changed ask refuses it and nothing reaches the agent. The request id is kept (IndexedDB,
// per notification) before the request goes: a Retry, or the same tap again, is the same request and the
// agent applies it once. The outcome replaces the notification; only an `unknown` a resend may settle
// offers Retry.
const answering = new Map();  // tag -> the answer under way: taps on one notification go one after the other
function answerFrom(n, action) {
  const next = (answering.get(n.tag) || Promise.resolve()).then(() => answerOnce(n, action));
  answering.set(n.tag, next.catch(() => {}));
  return next;
}
async function answerOnce(n, action) {
  const ask = n.data.ask;
  const kept = await answers("get", n.tag);
  let body, choice;
  if (action === "retry" && kept) ({ body, choice } = kept);
  else {
    choice = action === "retry" ? ask.choice : action;  // a Retry whose record is gone: the tap it repeats
    // a tap after an earlier one under this notification reuses its request id: the same answer is a replay,
    // another one is refused `conflict` (May already be applied) — never a second answer
    body = { request_id: kept ? kept.body.request_id : newId(), machine: ask.machine, agent: ask.agent,
             digest: ask.digest, answer: { option_ids: [ask[choice]] }, confirmed: false };
    if (!kept) await answers("put", n.tag, { body, choice, at: Date.now() });
  }
  let rec;
  try {
    // bounded: a browser ends a worker's event after a few minutes, and the notification would keep its buttons
    const r = await keyed(`/api/ask/${encodeURIComponent(ask.id)}`, { method: "POST", body: JSON.stringify(body),
      signal: AbortSignal.timeout(ANSWER_MS), headers: { "Content-Type": "application/json", ...CSRF } });
    let got = null;
    try { got = await r.json(); } catch (_) { got = null; }
    if (got && got.outcome) rec = got;
    else if (got && got.error && r.status !== 500 && r.status !== 502 && r.status !== 504) {
      rec = { outcome: "refused", text: got.message || WORDS.refused };  // the lead refused it: nothing was sent
    } else rec = { outcome: "unknown", text: WORDS.notCertain };
  } catch (_) { rec = { outcome: "unknown", text: WORDS.notCertain }; }
  return show(n, { ...ask, choice }, rec);
}
function show(n, ask, rec) {
  const title = rec.outcome === "accepted" ? (ask.choice === "deny" ? WORDS.denied : WORDS.allowed)
    : (rec.text || WORDS.refused);
  const retry = rec.outcome === "unknown" && rec.reason !== "conflict" && rec.reason !== "protocol";  // those are final
  return self.registration.showNotification(title, { body: n.body || "", tag: n.tag, icon: "/icon.svg",
    data: { url: n.data.url || "/", ask: retry ? ask : null }, renotify: false, silent: true,
    actions: retry ? [{ action: "retry", title: WORDS.retry }] : [] });
}
const newId = () => (self.crypto.randomUUID ? self.crypto.randomUUID() : `${Date.now()}-${Math.random()}`.replace(".", ""));
// the worker's own database (the page's "collie" stays as the pairing page made it): tag -> {body, choice, at};
// a week's answers are kept
function answers(op, tag, value) {
  return new Promise((ok) => {
    const o = indexedDB.open("collie-worker", 1);
    o.onupgradeneeded = () => o.result.createObjectStore("answers");
    o.onerror = () => ok(null);
    o.onsuccess = () => {
      const tx = o.result.transaction("answers", op === "get" ? "readonly" : "readwrite");
      const store = tx.objectStore("answers");
      if (op === "get") { const q = store.get(tag); q.onsuccess = () => ok(q.result || null); q.onerror = () => ok(null); return; }
      store.put(value, tag);
      const old = Date.now() - 7 * 86400e3;
      store.openCursor().onsuccess = (ev) => { const c = ev.target.result; if (c) { if (c.value.at < old) c.delete(); c.continue(); } };
      tx.oncomplete = () => ok(true);
      tx.onerror = () => ok(false);
    };
  });
}
