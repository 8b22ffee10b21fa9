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
  const v = $view(); v.className = ""; delete v.dataset.screen;
  v.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
  v.dataset.route = location.hash || "#/";
}
// Draw over what is shown, keeping a node that draws the same as its fresh copy: a button under the user's
// finger, a half-typed answer or an opened tool output is not swapped by a redraw (a flooding agent redraws
// the chat many times a second). Nodes that may be kept carry data-key; a text marked data-live (a countdown,
// a typed answer's counter) moves by itself and is not compared. A kept node marked data-deep (a container
// without handlers of its own) that changed takes the fresh one's attributes and its children are drawn
// over in the same way, so one changed row replaces that row only. A node that is replaced hands what the
// user typed or chose in it to its fresh copy (carry).
export function keep(parent, fresh) {
  const old = new Map();
  for (const o of (parent && parent.children) || []) if (o.dataset.key) old.set(o.dataset.key, o);
  fresh = fresh.flat().filter((n) => n !== null && n !== undefined && n !== false);
  return fresh.map((n) => {
    const o = n && n.dataset && n.dataset.key ? old.get(n.dataset.key) : null;
    if (!o) return n;
    old.delete(n.dataset.key);
    const a = o.querySelectorAll("[data-live]"), b = n.querySelectorAll("[data-live]");
    if (a.length === b.length) b.forEach((e, i) => { e.textContent = a[i].textContent; });
    if (o.isEqualNode(n)) return o;
    if (!n.hasAttribute("data-deep") || o.tagName !== n.tagName) { carry(o, n); return n; }
    for (const at of [...o.attributes]) if (!n.hasAttribute(at.name)) o.removeAttribute(at.name);
    for (const at of n.attributes) if (o.getAttribute(at.name) !== at.value) o.setAttribute(at.name, at.value);
    place(o, keep(o, [...n.childNodes]));
    return o;
  });
}
// What the user is typing or choosing is never replaced by a redraw (issue 36): when a node holding form
// fields is swapped for its fresh copy, each field the user changed gives its value, ticks or choice to the
// field at the same place in the copy (same tag and type), and a field that had the keyboard is followed by
// its copy (redraw puts the keyboard and the caret back). A field's `data-live` counter is moved alongside.
const FIELDS = "input, textarea, select";
const successor = new WeakMap();  // a replaced field -> its fresh copy, for redraw's focus
function changed(f) {
  if (f.type === "checkbox" || f.type === "radio") return f.checked !== f.defaultChecked;
  if (f.tagName === "SELECT") return [...f.options].some((o) => o.selected !== o.defaultSelected);
  return f.value !== f.defaultValue;
}
function carry(o, n) {
  const before = o.matches(FIELDS) ? [o] : [...o.querySelectorAll(FIELDS)];
  const after = n.matches(FIELDS) ? [n] : [...n.querySelectorAll(FIELDS)];
  if (!before.length || before.length !== after.length) return;
  before.forEach((f, i) => {
    const g = after[i];
    if (f.tagName !== g.tagName || f.type !== g.type) return;
    successor.set(f, g);
    if (!changed(f)) return;
    if (f.type === "checkbox" || f.type === "radio") g.checked = f.checked;
    else if (f.tagName === "SELECT") g.selectedIndex = f.selectedIndex;
    else { g.value = f.value; g.dispatchEvent(new Event("input")); }  // its counter counts what it holds
  });
}
// The field that has the keyboard, and where its caret is, before a redraw.
export function holding() {
  const f = document.activeElement;
  if (!f || !f.matches || !f.matches(FIELDS)) return null;
  let sel = null;
  try { sel = [f.selectionStart, f.selectionEnd, f.selectionDirection]; } catch (_) { sel = null; }
  return { f, sel };
}
// …and after it: the same field (moved, so it lost the keyboard) or its fresh copy gets it back, caret and all.
export function giveBack(held) {
  if (!held) return;
  let f = held.f;
  while (f && !f.isConnected && successor.has(f)) f = successor.get(f);
  if (!f || !f.isConnected || f.disabled) return;
  if (document.activeElement !== f) f.focus({ preventScroll: true });
  if (held.sel && held.sel[0] !== null) { try { f.setSelectionRange(...held.sel); } catch (_) { /* no caret */ } }
}
// Draw a screen: over itself in place when it is the one shown (same `screen` name), else afresh.
export function redraw(screen, nodes) {
  const v = $view();
  nodes = nodes.flat().filter((n) => n !== null && n !== undefined && n !== false);
  if (v.dataset.screen !== screen) { show(nodes); v.dataset.screen = screen; return false; }
  const held = holding();
  place(v, keep(v, nodes));
  v.dataset.route = location.hash || "#/";
  giveBack(held);
  return true;
}
// Put exactly `nodes` into parent, in order, moving nothing that is already in its place: what is no
// longer there goes first, so a window of items sliding by one moves none of the others (moving a node
// takes the keyboard from a field inside it).
export function place(parent, nodes) {
  const wanted = new Set(nodes);
  for (const c of [...parent.childNodes]) if (!wanted.has(c)) c.remove();
  let at = parent.firstChild;
  for (const n of nodes) { if (n === at) at = at.nextSibling; else parent.insertBefore(n, at); }
  while (at) { const next = at.nextSibling; at.remove(); at = next; }
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
