// Web Push (P): offer to turn notifications on, subscribe through the service worker, close the
// notification of an ask that is no longer open.
import { S } from "./strings.js";
import { api, write } from "./api.js";
import { app } from "./state.js";

const pushState = app.push;  // {offer, note, turns, cannot}: what the dashboard shows of push (state.js)
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
    if (Notification.permission !== "denied") pushState.turns = await api("/api/push/turns");
  } catch (_) { pushState.offer = false; }
}
// Issue 37: this phone's turn-end pushes — {all: bool} for every conversation, or {machine, agent, conversation,
// on} for one. They need this phone's push subscription: without one, notifications are turned on first.
export async function setTurns(body) {
  try {
    let got = await write("/api/push/turns", body);
    if (got && got.error === "no_subscription") {
      await turnOnPush();
      got = await write("/api/push/turns", body);
    }
    if (got && !got.error) pushState.turns = got; else pushState.note = (got && got.message) || S.notifyFailed;
  } catch (_) { pushState.note = S.notifyFailed; }
}
// Is a turn-end push on for this conversation? Its own setting, else this phone's for every conversation.
export function turnsOn(turns, machine, agent, conversation) {
  const own = turns.conversations.find((c) => c.machine === machine && c.agent === agent && c.conversation === conversation);
  return own ? own.on : turns.all;
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
