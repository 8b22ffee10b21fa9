// The first thing the page runs: lead/web.py writes this file into index.html's <head> as an inline
// script (allowed by its SHA-256 in the page's Content-Security-Policy), so it runs while the page is
// parsed, before any module has been asked for. It reads the device key and asks for the dashboard at
// once: the first screen's data is on its way while the app's modules arrive (#29: first render).
// api.js takes both over; nothing else uses them.
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
  const dash = location.hash === "" || location.hash === "#/" || location.hash === "#";
  // the same request api.js would make, with the same headers; a failure is api.js's to judge
  const response = dash ? key.then((k) => fetch("/api/dashboard", { credentials: "same-origin", cache: "no-cache",
    headers: k ? { "X-Collie-Device-Key": k } : {} })) : null;
  if (response) response.catch(() => {});  // never an unhandled rejection
  globalThis.collieEarly = { key, path: dash ? "/api/dashboard" : null, response };
})();
