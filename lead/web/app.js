// Collie's phone page. Plain ES modules, no build step. Everything an agent wrote is inserted as text
// (textContent); the only HTML inserted is Markdown the lead rendered with raw HTML off (crew/markdown.py).
// Data comes from the lead's JSON API and its live channel (docs/phone-api.md).
import { S, ICONS } from "./strings.js";

const CSRF = { "X-Collie-CSRF": "1" };
const app = {
  dash: null, needs: [], onlyNeeds: localStorage.getItem("onlyNeeds") === "1",
  es: null, channel: null, view: null, pane: null, items: new Map(), route: null,
  fromChannel: { pane: false, items: false },
  cards: new Map(),   // ask id -> {ask, requestId, pending, outcome, text, armed, retry, body}
  expired: new Map(), // ask id -> ask: asks that expired while shown (Q3: the buttons stay)
  mine: new Map(),    // request id -> {text, state, at} : my own lines (C3)
  convs: null, closed: [], closedNext: null, closedFooter: null, closedRead: false,
  movedOn: false,
};

// ---- tiny DOM helpers ----------------------------------------------------------------------------
function h(tag, attrs = {}, ...kids) {
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
const $view = () => document.getElementById("view");
function show(...nodes) { const v = $view(); v.replaceChildren(...nodes); v.dataset.route = location.hash || "#/"; }
function where(text) { document.getElementById("where").textContent = text || ""; }
function banner(text) { const b = document.getElementById("banner"); b.hidden = !text; b.textContent = text || ""; }
const enc = encodeURIComponent;
const rid = () => (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`.replace(".", ""));
function ago(iso) {
  if (!iso) return "";
  const d = new Date(iso); if (isNaN(d)) return "";
  const s = (Date.now() - d.getTime()) / 1000;
  if (s < 60) return "now"; if (s < 3600) return `${Math.floor(s / 60)} min`; if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return d.toLocaleDateString();
}

// ---- the API -------------------------------------------------------------------------------------
class Unpaired extends Error {}
// The device key (issue 25.1): the pairing page keeps it in this origin's IndexedDB ("collie", store
// "device", key "key"); every request carries it, with the cookie, as X-Collie-Device-Key.
let deviceKey = null;
function readKey() {
  return deviceKey || (deviceKey = new Promise((ok) => {
    const o = indexedDB.open("collie", 1);
    o.onupgradeneeded = () => o.result.createObjectStore("device");
    o.onerror = () => ok("");
    o.onsuccess = () => { const q = o.result.transaction("device").objectStore("device").get("key");
      q.onsuccess = () => ok(q.result || ""); q.onerror = () => ok(""); };
  }));
}
async function api(path, { method = "GET", body } = {}) {
  let r;
  try {
    const key = await readKey();
    r = await fetch(path, { method, credentials: "same-origin", cache: "no-store",
      headers: { ...(body !== undefined ? { "Content-Type": "application/json", ...CSRF } : (method === "GET" ? {} : CSRF)),
                 ...(key ? { "X-Collie-Device-Key": key } : {}) },
      body: body !== undefined ? JSON.stringify(body) : undefined });
  } catch (e) { banner(S.offline); throw e; }
  banner(navigator.onLine === false ? S.offline : "");
  if (r.status === 401) { deviceKey = null; throw new Unpaired(); }
  let data = null;
  try { data = await r.json(); } catch (_) { data = null; }
  if (!r.ok && !data) throw new Error(`HTTP ${r.status}`);
  return data;
}
const write = (path, body) => api(path, { method: "POST", body });

// ---- the live channel ------------------------------------------------------------------------------
function viewQuery(v) {
  if (!v) return "";
  const q = new URLSearchParams({ machine: v.machine, agent: v.agent });
  if (v.conversation) q.set("conversation", v.conversation);
  return "?" + q.toString();
}
function connect() {
  if (app.es) return;
  // EventSource sends no headers: a ticket fetched with the device key opens the channel (issue 25.1)
  app.es = { close() { this.closed = true; } };
  const pending = app.es;
  api("/api/events/ticket", { method: "POST", body: {} }).then((t) => {
    if (app.es === pending && !pending.closed) openChannel(t.ticket);
  }, (e) => {
    if (app.es !== pending) return;
    app.es = null;
    if (e instanceof Unpaired) showUnpaired(); else setTimeout(connect, 2000);
  });
}
function openChannel(ticket) {
  const q = viewQuery(app.view);
  const es = new EventSource("/api/events" + (q ? q + "&" : "?") + "ticket=" + encodeURIComponent(ticket));
  app.es = es;
  es.addEventListener("hello", (e) => { app.channel = JSON.parse(e.data).channel; pushView(); });
  es.addEventListener("snapshot", (e) => {
    const d = JSON.parse(e.data);
    app.dash = d.dashboard;
    if (d.pane !== undefined && sameView(d.view)) {
      keepExpired(app.pane, d.pane);  // Q3: a reconnect must not drop a card whose ask expired
      app.pane = d.pane; setItems(d.items || [], true); app.fromChannel = { pane: true, items: true };
    }
    refreshNeeds(); rerender();
  });
  es.addEventListener("row", (e) => {
    const d = JSON.parse(e.data);
    if (!app.dash) return;
    for (const s of app.dash.sections) {
      if (s.machine !== d.machine) continue;
      const i = s.agents.findIndex((a) => a.name === d.agent);
      if (d.row === null && i >= 0) s.agents.splice(i, 1);
      else if (i >= 0) s.agents[i] = d.row; else if (d.row) s.agents.push(d.row);
      s.waiting = s.agents.some((a) => a.waiting);
    }
    refreshNeeds(); if (isRoute("dash") || isRoute("agent")) rerender();
  });
  es.addEventListener("sections", (e) => {
    const d = JSON.parse(e.data);
    if (!app.dash) return;
    const byM = new Map(app.dash.sections.map((s) => [s.machine, s]));
    app.dash.sections = d.sections.map((head) => ({ ...(byM.get(head.machine) || { agents: [] }), ...head }));
    if (d.sections.some((s) => !byM.has(s.machine))) loadDashboard();
    if (isRoute("dash")) rerender();
  });
  es.addEventListener("pane", (e) => {
    const d = JSON.parse(e.data);
    if (!sameView(d)) return;
    if (app.pane && d.pane && d.pane.turn !== app.pane.turn) app.movedOn = false;
    keepExpired(app.pane, d.pane);
    app.pane = d.pane; app.fromChannel.pane = true; rerender();
  });
  es.addEventListener("items", (e) => {
    const d = JSON.parse(e.data);
    if (!sameView(d)) return;
    setItems(d.items, d.full); if (d.full) app.fromChannel.items = true;
    rerender();
  });
  es.addEventListener("inbox", () => { if (isRoute("inbox")) renderInbox(); });
  es.addEventListener("unauthorized", () => { es.close(); app.es = null; showUnpaired(); });
  es.onerror = () => { if (es.readyState === EventSource.CLOSED) { app.es = null; setTimeout(connect, 2000); } };
}
function keepExpired(before, after) {
  const still = new Set(((after && after.asks) || []).map((a) => a.id));
  for (const a of (before && before.asks) || []) {
    if (!still.has(a.id) && a.expires_at && new Date(a.expires_at).getTime() <= Date.now() + 1000) app.expired.set(a.id, a);
  }
}
function sameView(d) {
  return d && app.view && d.machine === app.view.machine && d.agent === app.view.agent &&
    d.conversation === app.view.conversation;
}
// Tell the lead what this page views (its agent is then polled every 2 s, and the chat gets its items live).
// A failed telling is tried again while the same channel is open: else the chat would stay silent.
let viewRetry = null;
async function pushView() {
  clearTimeout(viewRetry);
  const channel = app.channel, view = JSON.stringify(app.view);
  if (!channel) return;
  try { await write(`/api/events/${enc(channel)}/view`, app.view || {}); }
  catch (e) {
    if (e instanceof Unpaired) return;
    viewRetry = setTimeout(() => { if (app.channel === channel && JSON.stringify(app.view) === view) pushView(); }, 2000);
  }
}
function setItems(items, full) {
  if (full) app.items = new Map();
  for (const it of items || []) app.items.set(`${it.kind === "gap" ? "g" : ""}${it.seq}`, it);
}

// ---- routing ---------------------------------------------------------------------------------------
function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [kind, machine, agent, conversation] = parts;
  if (kind === "a" && agent) return { name: "agent", machine, agent };
  if (kind === "c" && conversation) return { name: "chat", machine, agent, conversation };
  if (kind === "closed" && conversation) return { name: "closedview", machine, agent, conversation };
  if (kind === "new" && agent) return { name: "new", machine, agent };
  if (kind === "inbox" && agent) return { name: "inbox", machine, agent };
  return { name: "dash" };
}
const isRoute = (n) => app.route && app.route.name === n;
async function navigate() {
  const r = app.route = parseRoute();
  const view = r.name === "chat" ? { machine: r.machine, agent: r.agent, conversation: r.conversation }
    : (r.agent ? { machine: r.machine, agent: r.agent, conversation: null } : null);
  const changed = JSON.stringify(view) !== JSON.stringify(app.view);
  app.view = view;
  if (changed) {
    app.pane = null; app.items = new Map(); app.movedOn = false; app.cards = new Map(); app.expired = new Map();
    app.fromChannel = { pane: false, items: false }; app.allAsks = false;
    pushView();
  }
  const main = $view(), gen = app.navigations = (app.navigations || 0) + 1;
  main.setAttribute("aria-busy", "true");  // until the newest screen's first reads are in
  try {
    if (r.name === "dash") { await loadDashboard(); }
    if (r.name === "agent") { app.convs = null; app.closed = []; app.closedNext = null; app.closedFooter = null;
      app.closedRead = false; await loadConversations(); }
    if (r.name === "chat") { app.loading = true; try { await loadChat(); } finally { app.loading = false; } }
    if (r.name === "closedview") return renderClosedView();
    if (r.name === "new") return renderStarters();
    if (r.name === "inbox") return renderInbox();
    rerender();
  } catch (e) { if (e instanceof Unpaired) showUnpaired(); } finally { if (gen === app.navigations) main.removeAttribute("aria-busy"); }
}
function rerender() {
  const r = app.route || { name: "dash" };
  if (r.name === "dash") renderDashboard();
  else if (r.name === "agent") renderConversations();
  else if (r.name === "chat") renderChat();
}
function showUnpaired() { where(""); show(h("p", { class: "warning", text: S.notPaired })); }

// ---- dashboard (D1–D5) and the Needs you list --------------------------------------------------------
async function loadDashboard() { app.dash = await api("/api/dashboard"); await refreshNeeds(); }
let needsTimer = null;
function refreshNeeds() {
  clearTimeout(needsTimer);
  needsTimer = setTimeout(async () => {
    const asked = Date.now();
    try { app.needs = (await api("/api/needs")).asks; closeAnsweredNotifications(asked); if (isRoute("dash")) renderDashboard(); }
    catch (_) { /* keep */ }
  }, 50);
}
function agentRow(machine, a) {
  const ready = a.status === "ready";
  const right = ready
    ? h("span", { class: "right" }, h("span", { "aria-label": `${a.open} open` }, String(a.open ?? 0)),
      a.waiting ? h("span", { class: "count-needs", "aria-label": `${a.waiting} waiting for you` }, String(a.waiting)) : null)
    : h("span", { class: "right status" }, a.status_label || a.status);
  const reason = !ready && a.status === "unreachable" && a.detail ? h("div", { class: "l2", text: a.detail }) : null;
  return h("li", {}, h("a", { class: "row", href: `#/a/${enc(machine)}/${enc(a.name)}` },
    h("span", { class: "main" }, h("div", { class: "l1" }, a.name, h("span", { class: "badge", text: S.experimental })),
      h("div", { class: "l2", text: a.line2 }), reason), right));
}
function renderDashboard() {
  where("");
  if (!app.dash) return;
  const nodes = [];
  if (app.needs.length) {
    nodes.push(h("section", { class: "section-needs", "aria-labelledby": "needs-h" },
      h("h2", { id: "needs-h", text: `${S.needsYou} (${app.needs.length})` }),
      h("ul", { class: "rows" }, app.needs.map((n) => h("li", {}, h("a", {
        class: "row", href: `#/c/${enc(n.machine)}/${enc(n.agent)}/${enc(n.conversation)}` },
        h("span", { class: "main" }, h("div", { class: "l1", text: n.title }),
          h("div", { class: "l2", text: `${n.conversation_title} · ${n.agent}${n.machine !== "local" ? " · " + n.machine : ""}` })),
        h("span", { class: "right", text: ago(n.since) })))))));
  }
  const toggle = h("input", { type: "checkbox", id: "only", checked: app.onlyNeeds,
    onchange: (e) => { app.onlyNeeds = e.target.checked; localStorage.setItem("onlyNeeds", app.onlyNeeds ? "1" : "0"); renderDashboard(); } });
  nodes.push(h("label", { class: "toggle", for: "only" }, toggle, S.onlyNeedsYou));
  if (pushState.offer) nodes.push(h("button", { id: "push", onclick: turnOnPush, text: S.notifyOn }));
  if (pushState.note) nodes.push(h("p", { class: "note", role: "status", text: pushState.note }));
  // D2, D5: a section with an agent waiting for you moves above the others
  const sections = [...app.dash.sections].sort((a, b) => (b.waiting ? 1 : 0) - (a.waiting ? 1 : 0));
  for (const s of sections) {
    const rows = s.agents.filter((a) => !app.onlyNeeds || a.waiting);
    if (!rows.length) continue;
    const title = s.label ? `${S.durableAgents} · ${s.label}` : S.durableAgents;
    nodes.push(h("section", { class: s.waiting ? "section-needs" : "", "data-machine": s.machine },
      h("h2", {}, title, s.online === false && s.offline_since ? h("span", { class: "note", text: ` · ${S.offlineSince(s.offline_since)}` }) : null),
      h("ul", { class: "rows" }, rows.map((a) => agentRow(s.machine, a)))));
  }
  if (!app.dash.sections.length) nodes.push(h("p", { class: "muted", text: S.noAgents }));
  show(...nodes);
}

// ---- an agent's conversation list (L1–L6) ---------------------------------------------------------
async function loadConversations() {
  const r = app.route;
  app.convs = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations`);
  if (!app.closedRead) { app.closedRead = true; loadClosed(); }
}
async function loadClosed() {
  const r = app.route;
  const q = app.closedNext ? `&cursor=${enc(app.closedNext)}` : "";
  try {
    const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations?closed=1${q}`);
    if (got.reason === "no_history") { app.closedFooter = null; app.closedNext = null; }
    else { app.closed = app.closed.concat(got.closed || []); app.closedNext = got.next; app.closedFooter = got.footer; }
  } catch (e) { if (e instanceof Unpaired) return showUnpaired(); app.closedFooter = S.listFailed; }
  if (isRoute("agent")) renderConversations();
}
function convRow(r, c, closed) {
  const href = closed ? `#/closed/${enc(r.machine)}/${enc(r.agent)}/${enc(c.id)}` : `#/c/${enc(r.machine)}/${enc(r.agent)}/${enc(c.id)}`;
  const mark = closed ? "" : ({ working: "● ", waiting: "◆ ", idle: "" }[c.state] || "");
  return h("li", {}, h("a", { class: "row", href },
    h("span", { class: "main" }, h("div", { class: "l1" }, mark, c.title || S.untitled),
      h("div", { class: "l2", text: c.line || c.subtitle || "" })),
    h("span", { class: "right" }, ago(c.activity || c.closed_at),
      c.waiting_asks ? h("span", { class: "count-needs", "aria-label": `${c.waiting_asks} asks waiting`, text: String(c.waiting_asks) }) : null)));
}
function renderConversations() {
  const r = app.route, d = app.convs;
  where(r.machine === "local" ? r.agent : `${r.agent} · ${r.machine}`);
  if (!d) return;
  const nodes = [h("h1", {}, r.agent, h("span", { class: "badge", text: S.experimental }))];
  if (d.warning) nodes.push(h("div", { class: "warning", role: "alert", text: d.warning }));
  nodes.push(h("div", { class: "menu" },
    h("a", { class: "btn", href: `#/new/${enc(r.machine)}/${enc(r.agent)}`, text: S.newConversation }),
    h("a", { class: "btn", href: `#/inbox/${enc(r.machine)}/${enc(r.agent)}`, text: S.inbox })));
  nodes.push(h("ul", { class: "rows", "aria-label": S.openConversations }, (d.open || []).map((c) => convRow(r, c, false))));
  if (app.closed.length) {
    nodes.push(h("h2", { text: S.closed }), h("ul", { class: "rows", "aria-label": S.closed }, app.closed.map((c) => convRow(r, c, true))));
  }
  if (app.closedNext) nodes.push(h("button", { onclick: loadClosed, text: S.loadMore }));
  if (app.closedFooter) nodes.push(h("p", { class: "footer", text: app.closedFooter }));
  show(...nodes);
}

async function renderClosedView() {
  const r = app.route;
  where(`${r.agent} · ${S.closed}`);
  const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/items`);
  const reopen = h("button", { onclick: async () => {
    const rec = await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/reopen`, { request_id: rid() });
    if (rec.outcome === "done") location.hash = `#/c/${enc(r.machine)}/${enc(r.agent)}/${enc(r.conversation)}`;
    else note.textContent = rec.text || rec.outcome;
  }, text: S.reopen });
  const note = h("p", { class: "note" });
  show(h("h1", {}, r.conversation, h("span", { class: "badge", text: S.experimental })), reopen, note,
    got.footer ? h("p", { class: "footer", text: got.footer }) : null,
    h("div", { class: "items" }, (got.items || []).map(itemNode)));
}

// ---- chat (C1–C9), ask cards (Q, O, R) ---------------------------------------------------------------
async function loadChat() {
  const r = app.route;
  const base = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}`;
  const [pane, items] = await Promise.all([api(base), api(`${base}/items`)]);
  // The live channel sends this view's pane and items too, then every change after them. Once it has,
  // what these requests read may be older than what it sent: keep the channel's (else a change that came
  // between would be lost until the next one).
  if (!app.fromChannel.pane) app.pane = pane && pane.error ? null : pane;
  if (!app.fromChannel.items) setItems((items && items.items) || [], true);
}
function itemNode(it) {
  const growing = it.final === false;
  const cls = `item ${it.kind}${growing ? " cursor" : ""}`;
  switch (it.kind) {
    case "gap": return h("div", { class: "item gap", text: S.leftOut });
    case "user": return h("div", { class: cls, text: it.text || "" });
    case "markdown":
      if (typeof it.html === "string") { const el = h("div", { class: cls }); el.innerHTML = it.html; return el; }
      return h("div", { class: cls, text: it.text || "" });
    case "code": return h("div", { class: cls }, it.lang ? h("div", { class: "note", text: it.lang }) : null, h("pre", {}, h("code", { text: it.text || "" })));
    case "link": return h("div", { class: cls }, it.url && /^https:\/\//i.test(it.url)
      ? h("a", { href: it.url, rel: "noopener noreferrer nofollow", target: "_blank", text: it.label || it.url })
      : h("span", { text: it.label || it.url || "" }));
    case "tool": return h("div", { class: cls, "data-tool": it.tool_call_id || "" },
      h("div", {}, h("strong", { text: it.title || it.name || "tool" })),
      h("div", { class: "tstatus", text: it.status || "" }), it.output ? h("pre", { text: String(it.output) }) : null);
    case "ask": return it.line ? h("div", { class: "item line", text: it.line }) : null;
    case "turn_end": return it.stopped ? h("div", { class: "item notice", text: S.stopped }) : null;
    default: return h("div", { class: cls, text: it.text || "" });
  }
}
function countdown(ask) {
  if (!ask.expires_at) return null;
  const left = Math.round((new Date(ask.expires_at).getTime() - Date.now()) / 1000);
  if (left <= 0) return S.expired;
  return left >= 60 ? S.expiresMin(Math.ceil(left / 60)) : S.expiresSec(left);
}
async function answer(ask, payload, { confirmed = false, retry = false } = {}) {
  const r = app.route;
  const st = app.cards.get(ask.id) || {};
  const requestId = retry && st.requestId ? st.requestId : rid();
  const body = retry && st.body ? st.body : { request_id: requestId, machine: r.machine, agent: r.agent,
    digest: ask.digest, answer: payload, confirmed };
  app.cards.set(ask.id, { ...st, ask, requestId, body, pending: true, outcome: null, text: null });
  renderChat();
  let rec;
  try { rec = await write(`/api/ask/${enc(ask.id)}`, body); }
  catch (e) { rec = { outcome: "unknown", text: S.notCertain }; }
  const next = { ...app.cards.get(ask.id), pending: false, outcome: rec.outcome, text: rec.text,
    retry: rec.outcome === "unknown", armed: false };
  if (rec.outcome === "changed" && rec.current_ask && app.pane) {
    const i = (app.pane.asks || []).findIndex((a) => a.id === ask.id);
    if (i >= 0) app.pane.asks[i] = rec.current_ask;
  }
  app.cards.set(ask.id, next);
  renderChat();
}
function askCard(ask) {
  const st = app.cards.get(ask.id) || {};
  const agent = app.route.agent;
  const locked = st.outcome && !["unknown", "changed", "refused", "invalid"].includes(st.outcome);
  const kids = [h("div", { class: "head", text: S.needsAnswer(agent) }), h("div", { class: "title", text: ask.title })];
  const cd = countdown(ask);
  if (cd) kids.push(h("div", { class: "note", "data-expiry": ask.expires_at, text: cd }));
  if (ask.body) kids.push(h("div", { text: ask.body }));
  if (ask.shortened || ask.text_shortened) kids.push(h("div", { class: "note", text: S.textShortened }));
  const dis = st.pending || locked;
  if (!ask.answerable) kids.push(h("div", { class: "note", text: S.cannotAnswer }));
  else if (ask.kind === "permission" || (ask.kind === "choice" && !ask.multiple)) {
    const opts = (ask.options || []).filter((o) => o.role !== "always_allow" || ask.always_allow).map((o) => {
      if (o.role === "always_allow") {
        const armed = st.armed;
        return h("button", { disabled: dis, class: armed ? "primary" : "", onclick: () => {
          if (!armed) { app.cards.set(ask.id, { ...st, ask, armed: true }); renderChat(); }
          else answer(ask, { option_ids: [o.id] }, { confirmed: true });
        } }, armed ? `${S.tapAgain} ${ask.tool || ""}`.trim() : (o.label || S.alwaysAllow));
      }
      return h("button", { disabled: dis, class: o.role === "allow" ? "primary" : "",
        onclick: () => answer(ask, { option_ids: [o.id] }), text: o.label });
    });
    kids.push(h("div", { class: "opts" }, opts));
  } else if (ask.kind === "choice") {
    const boxes = (ask.options || []).map((o) => h("label", { class: "toggle" },
      h("input", { type: "checkbox", value: o.id, disabled: dis }), o.label));
    kids.push(h("div", { class: "note", text: S.pickAny }), ...boxes,
      h("button", { class: "primary", disabled: dis, onclick: (e) => {
        const ids = [...e.target.closest(".card").querySelectorAll("input:checked")].map((x) => x.value);
        answer(ask, { option_ids: ids });
      }, text: S.send }));
  } else if (ask.kind === "text") {
    const max = ask.max_length || 500;
    const counter = h("div", { class: "note", text: S.counter(0, max) });
    const input = h("input", { type: "text", maxlength: max, placeholder: ask.placeholder || "", disabled: dis,
      "aria-label": ask.title, oninput: (e) => { counter.textContent = S.counter(e.target.value.length, max); } });
    kids.push(input, counter, h("button", { class: "primary", disabled: dis, onclick: () => answer(ask, { text: input.value }), text: S.send }));
  } else if (ask.kind === "form") {
    const inputs = [];
    for (const f of ask.fields || []) {
      const id = `f-${ask.id}-${f.id}`;
      let input;
      if (f.type === "toggle") input = h("input", { type: "checkbox", id, checked: !!f.default, disabled: dis });
      else if (f.type === "select") input = h("select", { id, disabled: dis }, h("option", { value: "", text: "" }),
        (f.options || []).map((o) => h("option", { value: o.id, text: o.label })));
      else input = h("input", { type: "text", id, maxlength: f.max_length || 500, disabled: dis });
      inputs.push([f, input]);
      kids.push(h("label", { for: id, class: f.type === "toggle" ? "toggle" : "" }, f.type === "toggle" ? input : null, f.label,
        f.required ? h("span", { class: "note", text: ` ${S.required}` }) : null), f.type === "toggle" ? null : input);
    }
    kids.push(h("button", { class: "primary", disabled: dis, onclick: () => {
      const fields = {};
      for (const [f, input] of inputs) fields[f.id] = f.type === "toggle" ? input.checked : input.value;
      answer(ask, { fields });
    }, text: S.send }));
  } else kids.push(h("div", { class: "note", text: S.cannotAnswer }));
  if (st.text) kids.push(h("div", { class: "outcome", role: "status", text: st.text }));
  if (st.retry) kids.push(h("button", { onclick: () => answer(ask, null, { retry: true }), text: S.retry }));
  return h("div", { class: `card${locked ? " locked" : ""}`, "data-ask": ask.id, role: "group", "aria-label": ask.title }, kids);
}
function mineNode(m) {
  const state = m.state === "not_confirmed" ? S.notConfirmed : m.state === "not_sent" ? S.notSent
    : m.state === "queued" ? S.queued : (m.state === "sent" ? S.sent : S.clock);
  return h("div", { class: "item mine", "data-request": m.request_id }, m.text, h("span", { class: "state", text: state }));
}
// C3: Send and Steer put my line up at once (a small clock). `Sending, not confirmed` keeps the text in the
// editor with its request id: sending the same text again retries under that id, so the agent gets it once.
let unconfirmed = null;  // {kind, text, requestId, conv}
async function sendText(kind) {
  const r = app.route, p = app.pane;
  const box = document.getElementById("editor");
  const text = box.value;
  if (!text.trim() || !p) return;
  const again = unconfirmed && unconfirmed.kind === kind && unconfirmed.text === text && unconfirmed.conv === r.conversation;
  const requestId = again ? unconfirmed.requestId : rid();
  unconfirmed = null;
  const base = { request_id: requestId, machine: r.machine, agent: r.agent, conversation: r.conversation, text, turn: p.turn };
  app.mine.set(requestId, { request_id: requestId, text, state: "clock", conv: r.conversation, at: Date.now() });
  box.value = "";
  setEditorNote("");
  renderChat();
  let rec;
  try {
    rec = kind === "send" ? await write("/api/send", base)
      : await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/steer`, base);
  } catch (_) { rec = { outcome: "unknown" }; }
  const m = app.mine.get(requestId);
  const editor = () => document.getElementById("editor");
  if (rec.outcome === "refused") {
    if (m) app.mine.delete(requestId);
    if (editor()) editor().value = text;  // C3: the text goes back into the editor
    if (rec.reason === "turn_moved") app.movedOn = true;
    setEditorNote(`${S.notSent}: ${rec.text || rec.reason}`);
  } else if (rec.outcome === "unknown") {
    if (m) m.state = "not_confirmed";
    unconfirmed = { kind, text, requestId, conv: r.conversation };
    if (editor() && !editor().value) editor().value = text;
    setEditorNote(S.notConfirmed);
  } else { if (m) m.state = rec.outcome === "queued" ? "queued" : "sent"; setEditorNote(rec.message || (rec.outcome === "queued" ? rec.text || S.queued : S.sent)); }
  renderChat();
}
let editorNote = "";
function setEditorNote(t) { editorNote = t || ""; const n = document.getElementById("editor-note"); if (n) n.textContent = editorNote; }
async function sessionWrite(op, extra = {}) {
  const r = app.route, p = app.pane;
  if (!p) return;
  const path = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/${op}`;
  const rec = await write(path, { request_id: rid(), turn: p.turn, ...extra });
  if (rec.outcome === "refused" && rec.reason === "turn_moved") { app.movedOn = true; setEditorNote(S.movedOn); }
  else setEditorNote(rec.message || rec.text || rec.outcome);
  renderChat();
}
function renderChat() {
  const r = app.route, p = app.pane;
  if (!p && app.loading) return;  // the pane of this view is on its way
  if (!p) {
    where(r.agent);
    return show(h("p", { class: "muted", text: S.notOpen }),
      h("a", { class: "btn", href: `#/a/${enc(r.machine)}/${enc(r.agent)}`, text: S.back }));
  }
  const keep = document.getElementById("editor");
  let draft = keep ? keep.value : "";
  const focused = document.activeElement && document.activeElement.id === "editor";
  where(`${r.agent}${r.machine !== "local" ? " · " + r.machine : ""}`);
  const asks = (p.asks || []).concat(app.allAsks ? p.asks_more || [] : []);  // Q8: first 5, the rest on a tap
  const byItem = new Map();
  for (const a of asks) { const k = a.item_id || `tool:${a.tool_call_id}`; if (!byItem.has(k)) byItem.set(k, []); byItem.get(k).push(a); }
  const placed = new Set();
  const items = [...app.items.values()].sort((a, b) => (a.seq - b.seq) || (a.kind === "gap" ? -1 : 1));
  const echoed = new Set(items.filter((i) => i.kind === "user" && i.request_id).map((i) => i.request_id));
  const list = [];
  let shown = 0;
  const cardFor = (a) => { placed.add(a.id); shown += 1; return askCard(a); };
  for (const it of items) {
    const node = itemNode(it);
    if (node) list.push(node);
    const here = (byItem.get(it.id) || []).concat(it.kind === "tool" ? byItem.get(`tool:${it.tool_call_id}`) || [] : []);
    for (const a of here) if (!placed.has(a.id)) list.push(cardFor(a));
  }
  for (const a of asks) if (!placed.has(a.id)) list.push(cardFor(a));
  // A card stays while it has something to say (an uncertain answer with Retry, an outcome) and, Q3,
  // after its ask expired: the buttons stay, and a late tap is answered `Timed out before an answer.`
  const open = new Set(asks.map((a) => a.id));
  for (const [id, st] of app.cards) {
    if (!open.has(id) && st.ask && (st.pending || st.retry || (st.text && st.outcome !== "accepted"))) list.push(cardFor(st.ask));
  }
  for (const [id, a] of app.expired) if (!open.has(id) && !app.cards.has(id)) list.push(cardFor(a));
  if (p.more_asks && !app.allAsks) list.push(h("button", { class: "row more-asks", onclick: () => { app.allAsks = true; renderChat(); },
    text: S.showMore(p.more_asks) }));
  // C3: my own lines until the agent's copy arrives (the lead's recent sends, then this page's own)
  const recent = new Map((p.recent_sends || []).map((m) => [m.request_id, m]));
  for (const [id, m] of app.mine) if (m.conv === r.conversation && !recent.has(id)) recent.set(id, m);
  if (unconfirmed && echoed.has(unconfirmed.requestId)) {  // B3: the agent wrote it into the session: it arrived
    if (draft === unconfirmed.text) draft = "";
    const m = app.mine.get(unconfirmed.requestId);
    if (m) m.state = "sent";
    unconfirmed = null;
    editorNote = S.sent;
  }
  const byText = items.filter((i) => i.kind === "user" && !i.request_id);
  for (const [id, m] of recent) {
    if (echoed.has(id)) continue;
    const same = m.at ? byText.findIndex((i) => i.text === m.text && Math.abs(new Date(i.at).getTime() - m.at) <= 30000) : -1;
    if (same >= 0) { byText.splice(same, 1); continue; }  // C4: matched by identical text within 30 s
    if (m.at && Date.now() - m.at > 10 * 60 * 1000) continue;      // C4: never echoed, gone after 10 minutes
    list.push(mineNode(m));
  }
  const last = items[items.length - 1];
  if (p.state === "working" && (!last || last.kind === "user")) list.push(h("div", { class: "working", "aria-label": "working", text: "•••" }));
  const c = p.controls || {};
  const dim = app.movedOn;
  const actions = (c.actions ? (p.actions || []).slice(0, 4) : []).map((a) => h("button", {
    class: `${a.busy ? "busy" : ""}${dim || a.disabled ? " dim" : ""}`, disabled: a.disabled || a.busy,
    "aria-label": a.label, onclick: () => sessionWrite(`actions/${enc(a.id)}`) },
    ICONS[a.icon] ? h("span", { "aria-hidden": "true", text: `${ICONS[a.icon]} ` }) : null, a.label.slice(0, 16)));
  const editor = h("textarea", { id: "editor", rows: 1, "aria-label": "Message", placeholder: "Message" });
  editor.value = draft;
  const bar = h("div", { class: "bar" }, h("div", { class: "inner" },
    h("div", { class: "actions" },
      c.steer ? h("button", { class: dim ? "dim" : "", onclick: () => sendText("steer"), text: S.steer }) : null,
      c.stop ? h("button", { class: dim ? "dim" : "", onclick: () => sessionWrite("stop"), text: S.stop }) : null, actions),
    h("div", { class: "editor" }, editor, h("button", { class: "primary", disabled: !c.send, onclick: () => sendText("send"), text: S.send })),
    h("div", { id: "editor-note", class: "note", role: "status", text: editorNote })));
  const menu = h("div", { class: "menu" },
    c.close ? h("button", { onclick: async () => {
      const rec = await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/close`, { request_id: rid() });
      if (rec.outcome === "done") location.hash = `#/a/${enc(r.machine)}/${enc(r.agent)}`; else setEditorNote(rec.text || rec.outcome);
    }, text: S.closeConversation }) : null);
  show(h("h1", {}, p.title || S.untitled, h("span", { class: "badge", text: S.experimental })),
    p.line2 ? h("p", { class: "header2", text: p.line2 }) : null, menu,
    h("div", { class: "items" }, list), bar);
  if (focused) document.getElementById("editor").focus();
}

// ---- new conversation (N1–N3) and the inbox (I3, I7, I9) ------------------------------------------------
async function renderStarters() {
  const r = app.route;
  where(r.agent);
  const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/starters`);
  const note = h("p", { class: "note", role: "status" });
  const rows = (got.starters || []).map((s) => h("li", {}, h("button", { class: "row", onclick: async () => {
    const rec = await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/starters/${enc(s.id)}`, { request_id: rid() });
    if (rec.outcome === "started" && rec.conversation) location.hash = `#/c/${enc(r.machine)}/${enc(r.agent)}/${enc(rec.conversation)}`;
    else note.textContent = rec.text || rec.outcome;
  } }, h("span", { class: "main" }, h("div", { class: "l1", text: s.label })))));
  show(h("h1", { text: got.title || S.newConversation }), got.empty ? h("p", { class: "muted", text: got.empty }) : null,
    h("ul", { class: "rows" }, rows), note);
}
async function renderInbox() {
  const r = app.route;
  where(`${r.agent} · ${S.inbox}`);
  const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/inbox`);
  const act = (id, op, body = {}) => write(`/api/inbox/${enc(id)}/${op}`, body).then(renderInbox);
  const items = got.items || [];
  const waiting = (it) => ["pending", "approved"].includes(it.state);
  const queue = items.filter(waiting);  // moves are positions in the waiting queue (I3)
  const row = (it) => {
    const i = queue.indexOf(it);
    // I7: the owner (like the sender) may add a message to a send that still waits
    const addMessage = (e) => {
      const box = h("input", { type: "text", "aria-label": S.messageToAdd });
      const go = h("button", { class: "primary", text: S.add,
        onclick: () => { if (box.value.trim()) act(it.id, "message", { text: box.value }); } });
      e.currentTarget.replaceWith(box, go);
      box.focus();
    };
    return h("div", { class: "inbox-item", "data-item": it.id },
      h("div", { class: "l1", text: it.text || (it.starter ? `starter ${it.starter}` : "") }),
      h("div", { class: "l2 note", text: `${it.state_text || it.state}${it.sender ? " · from " + it.sender : ""}` }),
      waiting(it) ? h("div", { class: "btns" },
        it.state === "pending" ? h("button", { class: "primary", onclick: () => act(it.id, "approve"), text: S.approve }) : null,
        i > 0 ? h("button", { "aria-label": S.moveUp, onclick: () => act(it.id, "move", { index: i - 1 }), text: "↑" }) : null,
        i < queue.length - 1 ? h("button", { "aria-label": S.moveDown, onclick: () => act(it.id, "move", { index: i + 1 }), text: "↓" }) : null,
        it.kind === "send" ? h("button", { onclick: addMessage, text: S.addMessage }) : null,
        h("button", { onclick: () => act(it.id, "cancel"), text: S.cancel })) : null);
  };
  const rest = items.filter((it) => !waiting(it));
  show(h("h1", { text: S.inbox }), items.length ? null : h("p", { class: "muted", text: S.inboxEmpty }),
    ...queue.map(row),
    queue.length ? h("button", { onclick: () => write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/inbox/clear`, {}).then(renderInbox), text: S.clearInbox }) : null,
    rest.length ? h("h2", { text: S.inboxDone }) : null, ...rest.map(row));
}

// ---- push (P) ------------------------------------------------------------------------------------------
const pushState = { offer: false, note: "" };
async function checkPush() {
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) return;
  try {
    const reg = await navigator.serviceWorker.ready;
    const sub = await reg.pushManager.getSubscription();
    pushState.offer = !sub && Notification.permission !== "denied";
    if (sub) await write("/api/push/subscribe", sub.toJSON());  // the lead may have dropped it: register again
  } catch (_) { pushState.offer = false; }
  if (isRoute("dash")) renderDashboard();
}
async function turnOnPush() {
  try {
    if ((await Notification.requestPermission()) !== "granted") { pushState.note = S.notifyDenied; return renderDashboard(); }
    const { key } = await api("/api/push/key");
    const reg = await navigator.serviceWorker.ready;
    const raw = Uint8Array.from(atob(key.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((key.length + 3) % 4)), (c) => c.charCodeAt(0));
    const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: raw });
    const got = await write("/api/push/subscribe", sub.toJSON());
    pushState.offer = !(got && got.ok);
    pushState.note = got && got.ok ? S.notifyDone : (got && got.message) || S.notifyFailed;
  } catch (e) { pushState.note = S.notifyFailed; }
  renderDashboard();
}
// P2 (docs/push.md): a notification whose ask is no longer open is closed. Only one shown before the list was asked
// for: a newer one is for an ask this list may not hold yet, and closing it would lose the ask's alert.
function closeAnsweredNotifications(asked) {
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.ready.then((reg) => reg.getNotifications()).then((list) => {
    const open = new Set(app.needs.map((n) => `ask:${n.machine}/${n.agent}/${n.ask}`));
    for (const n of list) if (n.tag && n.tag.startsWith("ask:") && !open.has(n.tag) && n.timestamp < asked) n.close();
  }).catch(() => {});
}

// ---- start -------------------------------------------------------------------------------------------
setInterval(() => { // Q3: countdowns move without a redraw of the whole page
  for (const el of document.querySelectorAll("[data-expiry]")) el.textContent = countdown({ expires_at: el.dataset.expiry });
}, 1000);
window.addEventListener("hashchange", navigate);
window.addEventListener("offline", () => banner(S.offline));
window.addEventListener("online", () => banner(""));
if ("serviceWorker" in navigator) navigator.serviceWorker.register("/sw.js").catch(() => {});
navigate().then(connect).then(checkPush);
