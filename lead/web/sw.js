// Collie's service worker: the app shell opens offline (and says so); the API is never cached.
// The shell's files are served under /v/<VERSION>/ (lead/web.py writes VERSION in when it serves this file):
// immutable names, so they are read from this cache first; the page itself is asked for first from the network.
const VERSION = "dev";
const SHELL = `collie-shell-${VERSION}`;
const MODULES = ["app", "api", "state", "dom", "dashboard", "agent", "chat", "askcard", "items", "icons", "inbox",
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

// The device key the pairing page kept in this origin's IndexedDB (issue 25.1), for the worker's own requests
function readKey() {
  return new Promise((ok) => {
    const o = indexedDB.open("collie", 1);
    o.onupgradeneeded = () => o.result.createObjectStore("device");
    o.onerror = () => ok("");
    o.onsuccess = () => { const q = o.result.transaction("device").objectStore("device").get("key");
      q.onsuccess = () => ok(q.result || ""); q.onerror = () => ok(""); };
  });
}

// Push (features P2, P3): show the ask's notification; tapping it opens that ask's card. A push for an
// ask that was answered meanwhile (on another device, or in the agent) is not shown.
self.addEventListener("push", (e) => {
  let d;
  try { d = e.data.json(); } catch (_) { d = { title: "Collie", body: e.data ? e.data.text() : "" }; }
  e.waitUntil((async () => {
    if (d.kind === "ask" && d.ask) {
      try {
        const key = await readKey();
        const r = await fetch("/api/needs", { credentials: "same-origin", cache: "no-store",
                                              headers: key ? { "X-Collie-Device-Key": key } : {} });
        if (r.ok) {
          const open = (await r.json()).asks.some((a) => a.machine === d.ask.machine && a.agent === d.ask.agent && a.ask === d.ask.id);
          if (!open) return;
        }
      } catch (_) { /* offline: show it */ }
    }
    await self.registration.showNotification(d.title || "Collie", { body: d.body || "", tag: d.tag, data: { url: d.url || "/" },
      icon: "/icon.svg", renotify: d.kind === "many" });
  })());
});
self.addEventListener("notificationclick", (e) => {
  e.notification.close();
  const url = (e.notification.data && e.notification.data.url) || "/";
  e.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((wins) => {
    for (const w of wins) { if ("focus" in w) { w.navigate(url); return w.focus(); } }
    return self.clients.openWindow(url);
  }));
});
