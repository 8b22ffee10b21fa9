// Tiny DOM helpers shared by every screen. Data is only ever inserted as text (textContent): the one
// place HTML is inserted is Markdown the lead rendered with raw HTML off (chat.js, crew/markdown.py).
export function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
export const $view = () => document.getElementById("view");
// Draw a screen. An absent part (null, false) draws nothing: replaceChildren would write it as "null".
export function show(...nodes) {
  const v = $view(); v.className = "";
  v.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
  v.dataset.route = location.hash || "#/";
}
export function where(text) { document.getElementById("where").textContent = text || ""; }
export function banner(text) { const b = document.getElementById("banner"); b.hidden = !text; b.textContent = text || ""; }
export const enc = encodeURIComponent;
export const rid = () => (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`.replace(".", ""));
export function ago(iso) {
  if (!iso) return "";
  const d = new Date(iso); if (isNaN(d)) return "";
  const s = (Date.now() - d.getTime()) / 1000;
  if (s < 60) return "now"; if (s < 3600) return `${Math.floor(s / 60)} min`; if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return d.toLocaleDateString();
}
// A time in the phone's own zone and 24-hour clock: `14:05`, or `3 Dec 14:05` when not today. Takes an
// ISO time or epoch seconds; anything else is no time at all (never a raw number on screen).
export function clock(t) {
  const d = typeof t === "number" ? new Date(t * 1000) : (typeof t === "string" ? new Date(t) : null);
  if (!d || isNaN(d)) return "";
  const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  return d.toDateString() === new Date().toDateString() ? hm : `${d.toLocaleDateString([], { day: "numeric", month: "short" })} ${hm}`;
}
