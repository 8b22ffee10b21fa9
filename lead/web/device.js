// This phone's keys, as the pairing page kept them in this origin's IndexedDB ("collie", store "device"):
// "key", the device key sent with every request as X-Collie-Device-Key, and "sign", the signing key
// (ECDSA P-256, not extractable) that renews a cookie a neighbour replaced (issue 25.1, docs/phone-api.md
// "Pairing a phone"). Shared by the page (api.js imports it) and the service worker (importScripts), so it
// is a plain script that sets one global.
globalThis.collieDevice = (() => {
  function stored(name) {
    return new Promise((ok) => {
      let o;
      try { o = indexedDB.open("collie", 1); } catch (_) { ok(null); return; }
      o.onupgradeneeded = () => o.result.createObjectStore("device");
      o.onerror = () => ok(null);
      o.onsuccess = () => {
        try {
          const q = o.result.transaction("device").objectStore("device").get(name);
          q.onsuccess = () => ok(q.result || null); q.onerror = () => ok(null);
        } catch (_) { ok(null); }
      };
    });
  }
  const b64url = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/[+]/g, "-").replace(/[/]/g, "_").replace(/=+$/, "");
  // POST /pair/renew twice: a challenge for the device key, then the signature over it for a new cookie.
  // True when the lead set one; false when this phone must pair again (no signing key, revoked, refused);
  // null when a request did not reach the lead (a network error: nothing says the phone is not paired).
  async function renew(key) {
    try {
      const sign = await stored("sign");
      if (!key || !sign || !sign.privateKey) return false;
      const post = (body) => fetch("/pair/renew", { method: "POST", credentials: "same-origin", cache: "no-store",
        headers: { "Content-Type": "application/json", "X-Collie-CSRF": "1", "X-Collie-Device-Key": key },
        body: JSON.stringify(body) });
      const got = await post({});
      if (!got.ok) return false;
      const { challenge } = await got.json();
      const data = new TextEncoder().encode(`collie-renew-v1\n${challenge}`);
      const sig = await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, sign.privateKey, data);
      return (await post({ challenge, signature: b64url(sig) })).ok;
    } catch (e) { return e instanceof TypeError ? null : false; }  // fetch's network errors are TypeErrors
  }
  return { stored, renew };
})();
