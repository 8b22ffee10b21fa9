// Web Push (P): offer to turn notifications on, subscribe through the service worker, close the
// notification of an ask that is no longer open.
import { S } from "./strings.js";
import { api, write } from "./api.js";
import { app } from "./state.js";

const pushState = app.push;  // {offer, note, cannot}: what the dashboard shows of push (state.js)
const apple = () => /iPad|iPhone|iPod/.test(navigator.userAgent) || (navigator.platform === "MacIntel" && navigator.maxTouchPoints > 1);
// Why this page can have no notifications, with the fix (phone-api.md "A real phone"): never a silent absence
function cannot() {
  if (apple() && !("PushManager" in window)) return { text: S.pushHomeScreen, link: null };
  if (!("serviceWorker" in navigator) || !window.isSecureContext) return { text: S.pushNoTrust, link: "/trust" };
  if (!("PushManager" in window) || !("Notification" in window)) return { text: S.pushNone, link: null };
  return null;
}
export async function checkPush() {
  pushState.cannot = cannot();
  if (!pushState.cannot && !(await pushState.sw)) pushState.cannot = { text: S.pushNoTrust, link: "/trust" };
  if (pushState.cannot) { pushState.offer = false; return; }
  try {
    const reg = await navigator.serviceWorker.ready;
    const sub = await reg.pushManager.getSubscription();
    pushState.offer = !sub && Notification.permission !== "denied";
    if (sub) await write("/api/push/subscribe", sub.toJSON());  // the lead may have dropped it: register again
  } catch (_) { pushState.offer = false; }
}
export async function turnOnPush() {
  try {
    if ((await Notification.requestPermission()) !== "granted") { pushState.note = S.notifyDenied; return; }
    const { key } = await api("/api/push/key");
    const reg = await navigator.serviceWorker.ready;
    const raw = Uint8Array.from(atob(key.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((key.length + 3) % 4)), (c) => c.charCodeAt(0));
    const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: raw });
    const got = await write("/api/push/subscribe", sub.toJSON());
    pushState.offer = !(got && got.ok);
    pushState.note = got && got.ok ? S.notifyDone : (got && got.message) || S.notifyFailed;
  } catch (e) { pushState.note = S.notifyFailed; }
}
// P2 (docs/push.md): a notification whose ask is no longer open is closed. Only one shown before the list was asked
// for: a newer one is for an ask this list may not hold yet, and closing it would lose the ask's alert.
export function closeAnsweredNotifications(asked) {
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.ready.then((reg) => reg.getNotifications()).then((list) => {
    const open = new Set(app.needs.map((n) => `ask:${n.machine}/${n.agent}/${n.ask}`));
    for (const n of list) if (n.tag && n.tag.startsWith("ask:") && !open.has(n.tag) && n.timestamp < asked) n.close();
  }).catch(() => {});
}
