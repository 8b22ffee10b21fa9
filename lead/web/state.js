// The page's state and its routing: what the live channel and the API told us, which screen shows, and
// which view the lead is told about. Screens register here (app.js) and read `app`; they never fetch.
import { api, connect as openChannel, tellView, tags, Unpaired, userActive, onActivity, leadHeardActive } from "./api.js";
import { h, $view, show, where, clock } from "./dom.js";
import { S } from "./strings.js";

export const app = {
  dash: null, needs: [], needsGone: [], onlyNeeds: localStorage.getItem("onlyNeeds") === "1",
  channel: null, view: null, pane: null, items: new Map(), route: null,
  // issue 39: what the page holds, told to the lead so that it sends only the rest: the dashboard's tag as
  // read (null once an event changed it), the viewed chat's items up to a revision, and the `before` of the
  // page above the items held (null: none older is held by the lead)
  dashTag: null, itemsSince: null, itemsEarlier: null,
  fromChannel: { pane: false, items: false },
  cards: new Map(),   // ask id -> {ask, requestId, pending, outcome, text, armed, retry, body}
  expired: new Map(), // ask id -> ask: asks that expired while shown (Q3: the buttons stay)
  mine: new Map(),    // request id -> {text, state, at} : my own lines (C3)
  convs: null, closed: [], closedNext: null, closedFooter: null, closedRead: false,
  movedOn: false,
  lastActions: new Map(),  // conversation -> its agent buttons, kept in place while its machine is offline (C7)
  approvals: [],           // [{machine, agent, count}]: API-token senders' requests waiting for approval (I3)
  // the dashboard's offer to turn notifications on, and this phone's turn-end settings (push.js fills them:
  // turns is GET /api/push/turns, null where this browser has no push); or why it cannot ({text, link});
  // sw: whether the service worker registered (app.js)
  push: { offer: false, note: "", turns: null, cannot: null, sw: null },
};
// route name -> {load?, render}; a screen's module is fetched when it is first shown (the first load
// carries only the dashboard's)
const screens = {}, loaders = {};
export function register(name, loader) { loaders[name] = loader; }
async function screenOf(name) {
  if (!screens[name]) screens[name] = await loaders[name]();
  return screens[name];
}

// ---- routing ---------------------------------------------------------------------------------------
export function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [kind, machine, agent, conversation, ask] = parts;
  if (kind === "a" && agent) return { name: "agent", machine, agent };
  if (kind === "c" && conversation) return { name: "chat", machine, agent, conversation, ask: ask || null };
  if (kind === "closed" && conversation) return { name: "closedview", machine, agent, conversation };
  if (kind === "new" && agent) return { name: "new", machine, agent };
  if (kind === "inbox" && agent) return { name: "inbox", machine, agent };
  return { name: "dash" };
}
export const isRoute = (n) => app.route && app.route.name === n;
let lastHash = null;  // the screen shown before this one (kept in history.state.prev of each entry)
export async function navigate() {
  const r = app.route = parseRoute();
  const view = r.name === "chat" ? { machine: r.machine, agent: r.agent, conversation: r.conversation }
    : (r.agent ? { machine: r.machine, agent: r.agent, conversation: null } : null);
  const changed = JSON.stringify(view) !== JSON.stringify(app.view);
  app.view = view;
  if (changed) {
    app.pane = null; app.items = new Map(); app.movedOn = false; app.cards = new Map(); app.expired = new Map();
    app.fromChannel = { pane: false, items: false }; app.allAsks = false; app.itemsSince = null; app.itemsEarlier = null;
    if (r.name !== "chat") pushView();  // a chat tells its view once its first read is in (chat.js), with what it holds
  }
  // an installed web app has no browser back button: the header's Back goes up one screen, and adds no
  // history entry — when the screen before is that one it is history.back(), else this entry is replaced —
  // so the phone's own Back afterwards never goes forward into the screen just left (issue 36)
  const here = location.hash || "#/";
  const st = history.state;
  if (!st || typeof st.prev !== "string") history.replaceState({ prev: lastHash }, "");
  lastHash = here;
  const back = document.getElementById("back");
  back.hidden = r.name === "dash";
  back.textContent = S.back;
  back.href = r.name === "agent" || !r.agent ? "#/" : `#/a/${encodeURIComponent(r.machine)}/${encodeURIComponent(r.agent)}`;
  back.onclick = (e) => {
    e.preventDefault();
    const up = back.getAttribute("href"), prev = history.state && history.state.prev;
    if (prev === up || (up === "#/" && ["", "#", "#/"].includes(prev))) history.back(); else location.replace(up);
  };
  const main = $view(), gen = app.navigations = (app.navigations || 0) + 1;
  main.setAttribute("aria-busy", "true");  // until the newest screen's first reads are in
  try {
    const screen = await screenOf(r.name);
    if (gen !== app.navigations) return;
    if (screen.load) {
      const reading = screen.load(r);
      // what the live channel sent while this screen's module was on its way is drawn now, not after the reads
      if (!screen.drawsItself && (app.fromChannel.pane || r.name === "dash")) rerender();
      await reading;
    }
    if (screen.drawsItself) return;
    rerender();
  } catch (e) {
    if (e instanceof Unpaired) showUnpaired();
    // never `Loading…` for ever: what can be drawn is, else the screen says it could not be read
    else if (gen === app.navigations) { try { rerender(); } catch (_) { /* drawn below */ }
      if (main.dataset.route !== (location.hash || "#/")) show(h("p", { class: "warning", role: "status", text: S.notLoaded })); }
  } finally { if (gen === app.navigations) main.removeAttribute("aria-busy"); }
}
// Redraw the current screen from the state (screens that read on every draw are left alone).
export function rerender() {
  const r = app.route || { name: "dash" };
  const screen = screens[r.name];
  if (screen && !screen.drawsItself) screen.render(r);
}
export function showUnpaired() { where(""); show(h("p", { class: "warning", text: S.notPaired })); }

// ---- the Needs you list ------------------------------------------------------------------------------
export async function loadDashboard() { app.dash = await api("/api/dashboard"); app.dashTag = tags.get("/api/dashboard") || null; await refreshNeeds(); }
let needsTimer = null;
export const needsListeners = [];
// The live channel's list (its `needs` event and snapshot): open asks only; approvals come with GET /api/needs.
function setNeeds(asks, gone) {
  app.needs = asks;
  if (Array.isArray(gone)) app.needsGone = gone;  // asks of agents that are gone: shown apart, not counted (issue 36)
  const now = Date.now(); for (const fn of needsListeners) fn(now);
}
export function refreshNeeds() {
  clearTimeout(needsTimer);
  needsTimer = setTimeout(async () => {
    const asked = Date.now();
    try { const got = await api("/api/needs"); app.needs = got.asks || []; app.needsGone = got.unreachable || []; app.approvals = got.approvals || []; for (const fn of needsListeners) fn(asked); if (isRoute("dash")) rerender(); }
    catch (_) { /* keep */ }
  }, 50);
}

// ---- the live channel's events, applied to the state ----------------------------------------------------
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
// Issue 39: a chat holds its newest page and the pages above it the user asked for. A `full` set is the
// newest page (`earlier`: the `before` of the page above it, absent when nothing older is kept) and
// replaces what is held; a set of changes updates what is held, and leaves out an item above the oldest
// page held (it is read with its page, when asked for). `older` adds the page above.
const itemKey = (it) => `${it.kind === "gap" ? "g" : ""}${it.seq}`;
export function setItems(items, full, earlier = null) {
  if (full) { app.items = new Map(); app.itemsEarlier = earlier; }
  const floor = app.itemsEarlier;
  for (const it of items || []) {
    if (!full && floor !== null && it.seq < floor) continue;
    app.items.set(itemKey(it), it);
    if (Number.isInteger(it.rev) && it.rev > (app.itemsSince || 0)) app.itemsSince = it.rev;
  }
}
export function olderItems(page) {
  for (const it of page.items || []) if (app.itemsEarlier === null || it.seq < app.itemsEarlier) app.items.set(itemKey(it), it);
  app.itemsEarlier = page.earlier === undefined ? null : page.earlier;
}
const events = {
  hello(d) {  // the lead was told the view in the channel's address: told again only if it changed since
    app.channel = d.channel;
    // a fresh channel is idle at the lead (its address says nothing of use): a page in use says so again
    if (JSON.stringify(d.opened || null) !== JSON.stringify(app.view) || userActive()) pushView();
  },
  snapshot(d) {
    // null: the dashboard the page said it read is still current — but if events changed the page's copy since
    // (a browser's own reconnect repeats the address it opened with), it reads the dashboard again
    if (d.dashboard) { app.dash = d.dashboard; app.dashTag = null; } else if (app.dashTag === null) loadDashboard();
    if (d.pane !== undefined && sameView(d.view)) {
      keepExpired(app.pane, d.pane);  // Q3: a reconnect must not drop a card whose ask expired
      app.pane = d.pane; setItems(d.items || [], d.items_full !== false, d.earlier ?? null); app.fromChannel = { pane: true, items: true };
    }
    if (Array.isArray(d.needs)) setNeeds(d.needs, d.needs_unreachable || []); else refreshNeeds();
    rerender();
  },
  // the whole Needs you list whenever it changes (an ask swapped for another changes no row)
  needs(d) { if (Array.isArray(d.asks)) { setNeeds(d.asks, d.unreachable || []); if (isRoute("dash")) rerender(); } },
  row(d) {
    if (!app.dash) return;
    app.dashTag = null;
    for (const s of app.dash.sections) {
      if (s.machine !== d.machine) continue;
      const i = s.agents.findIndex((a) => a.name === d.agent);
      if (d.row === null && i >= 0) s.agents.splice(i, 1);
      else if (i >= 0) s.agents[i] = d.row; else if (d.row) s.agents.push(d.row);
      s.waiting = s.agents.some((a) => a.waiting);
    }
    if (isRoute("agent") && app.route.machine === d.machine && app.route.agent === d.agent) refreshList(d.row);
    if (isRoute("dash") || isRoute("agent") || isRoute("chat")) rerender();
  },
  sections(d) {
    if (!app.dash) return;
    app.dashTag = null;
    const byM = new Map(app.dash.sections.map((s) => [s.machine, s]));
    app.dash.sections = d.sections.map((head) => ({ ...(byM.get(head.machine) || { agents: [] }), ...head }));
    if (d.sections.some((s) => !byM.has(s.machine))) loadDashboard();
    rerender();
  },
  pane(d) {
    if (!sameView(d)) return;
    if (app.pane && d.pane && d.pane.turn !== app.pane.turn) app.movedOn = false;
    keepExpired(app.pane, d.pane);
    app.pane = d.pane; app.fromChannel.pane = true; rerender();
  },
  items(d) {
    if (!sameView(d)) return;
    setItems(d.items, d.full, d.earlier ?? null); if (d.full) app.fromChannel.items = true;
    rerender();
  },
  inbox() { refreshNeeds(); if (isRoute("inbox") && screens.inbox) screens.inbox.render(app.route); },
  unauthorized() { showUnpaired(); },
};
export function connect() {
  openChannel(() => app.view, events, () => ({ have: app.dashTag, items_since: app.view && app.view.conversation ? app.itemsSince : null }));
}
// A failed telling is tried again while the same channel is open: else the chat would stay silent.
// One telling at a time: two on their way at once may reach the lead in either order, and the lead keeps the
// last one it got. A chat's first read tells `active: false`, and the chat scrolling to its newest item a
// moment later makes the page active and tells `active: true`: had the older one come in last, the lead would
// beat every 25 s while the page, counting on 2 s, said `The lead is not answering` 4 s later and refused every
// tap. A telling asked for while one is on its way goes once that one is answered, with what is true then.
let viewRetry = null, telling = false, tellAgain = false;
onActivity(() => pushView());  // the user began or stopped using the page: the lead beats every 2 s, or 25 s
export async function pushView() {
  clearTimeout(viewRetry);
  if (telling) { tellAgain = true; return; }
  const channel = app.channel, view = JSON.stringify(app.view);
  if (!channel) return;
  // issue 37: whether the page is on screen goes with the view (a phone viewing a chat gets no turn-end push for it);
  // issue 39: with the revision it holds the chat's items up to
  const held = app.view && app.view.conversation && app.itemsSince !== null ? { items_since: app.itemsSince } : {};
  const active = userActive();
  telling = true;
  try {
    const got = await tellView(channel, { ...(app.view || {}), ...held, visible: document.visibilityState !== "hidden", active });
    if (active && got && got.ok) leadHeardActive();  // it beats every 2 s from now on
  } catch (e) {
    if (!(e instanceof Unpaired)) viewRetry = setTimeout(() => { if (app.channel === channel && JSON.stringify(app.view) === view) pushView(); }, 2000);
  } finally {
    telling = false;
    if (tellAgain) { tellAgain = false; pushView(); }
  }
}

// L4: the open list follows the agent (its row changed: an ask came or went, a conversation opened or
// closed); the closed list is read again only when the count of open conversations changed.
let listTimer = null;
function refreshList(row) {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => { if (isRoute("agent") && screens.agent && screens.agent.refresh) screens.agent.refresh(app.route, row); }, 100);
}

// The section of `machine` while it is offline (its label, offline_since), else null.
export function offlineSection(machine) {
  const s = app.dash && app.dash.sections.find((x) => x.machine === machine);
  return s && s.online === false ? s : null;
}
// What stands between the user and this agent, in the user's words: its machine offline, or the agent
// not answering (D1, C7). Null when nothing does.
export function agentNotice(machine, agent) {
  const s = app.dash && app.dash.sections.find((x) => x.machine === machine);
  if (!s) return null;
  if (s.online === false) return S.memberOffline(s.label || machine, clock(s.offline_since));
  const row = (s.agents || []).find((a) => a.name === agent);
  if (row && row.status === "unreachable") return S.unreachableWhy(agent, row.reason);
  return null;
}
