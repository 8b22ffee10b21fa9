// The first thing the page runs: lead/web.py writes this file into index.html's <head> as an inline
// script (allowed by its SHA-256 in the page's Content-Security-Policy), so it runs while the page is
// parsed, before any module has been asked for. It reads the device key and asks at once for the first
// screen's data — the dashboard, or a chat's pane and newest page (issue 39) — so it is on its way while
// the app's modules arrive (#29: first render). api.js takes them over; nothing else uses them.
(() => {
  const key = new Promise((ok) => {
    let o;
    try { o = indexedDB.open("collie", 1); } catch (_) { ok(""); return; }
    o.onupgradeneeded = () => o.result.createObjectStore("device");
    o.onerror = () => ok("");
    o.onsuccess = () => {
      try {
        const q = o.result.transaction("device").objectStore("device").get("key");
        q.onsuccess = () => ok(q.result || ""); q.onerror = () => ok("");
      } catch (_) { ok(""); }
    };
  });
  // the same paths the screens read (state.js parseRoute, chat.js read), with the same headers as api.js
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  let paths = [];
  if (parts.length === 1 && parts[0] === "") paths = ["/api/dashboard"];
  else if (parts[0] === "c" && parts[3]) {
    try {
      const [m, a, c] = parts.slice(1, 4).map((p) => encodeURIComponent(decodeURIComponent(p)));
      const base = `/api/agents/${m}/${a}/conversations/${c}`;
      paths = [base, `${base}/items?newest=200`];  // chat.js: its WINDOW
    } catch (_) { paths = []; }
  }
  const reads = {};
  for (const path of paths) {
    // a failure is api.js's to judge; never an unhandled rejection
    (reads[path] = key.then((k) => fetch(path, { credentials: "same-origin", cache: "no-cache",
      headers: k ? { "X-Collie-Device-Key": k } : {} }))).catch(() => {});
  }
  globalThis.collieEarly = { key, reads };
})();
