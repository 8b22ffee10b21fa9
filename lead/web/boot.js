// The first thing the page runs (it imports nothing, so it runs before the app's modules have arrived):
// the device key is read and the dashboard asked for at once, so the first screen's data is on its way
// while the rest of the page loads (#29: first render). api.js takes both over; nothing else uses them.
function storedKey() {
  return new Promise((ok) => {
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
}
const key = storedKey();
const dash = location.hash === "" || location.hash === "#/" || location.hash === "#";
globalThis.collieEarly = {
  key,
  path: dash ? "/api/dashboard" : null,
  // the same request api.js would make (api.js gives it the same headers); a failure is api.js's to judge
  response: dash ? key.then((k) => fetch("/api/dashboard", { credentials: "same-origin", cache: "no-store",
    headers: k ? { "X-Collie-Device-Key": k } : {} })) : null,
};
if (globalThis.collieEarly.response) globalThis.collieEarly.response.catch(() => {});  // never unhandled
