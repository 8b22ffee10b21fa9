// The chat (C1–C9): a conversation's items with its ask cards, my own lines, the action bar and editor.
// It opens at the newest item, follows new ones while the user is at the bottom (else offers `New items`),
// and a Needs you tap (#/c/…/<ask id>) lands on that ask's card.
import { S } from "./strings.js";
import { h, show, redraw, $view, where, enc, rid, clock } from "./dom.js";
import { api, write, Unreachable, Offline, STALE } from "./api.js";
import { app, setItems, olderItems, agentNotice, pushView, offlineSection } from "./state.js";
import { itemNode } from "./items.js";
import { askCard, keptCard } from "./askcard.js";
import { icon } from "./icons.js";
import { setTurns, turnsOn } from "./push.js";

// #29: the chat draws at most WINDOW items (a long conversation would otherwise keep thousands of nodes):
// its newest while the user follows them; once they scrolled up, the window stays where it is (what they
// read does not slide away under new items, which wait behind `New items`). `Show earlier messages` widens
// it by a page above, keeping what is on screen in place.
const WINDOW = 200;
const fresh = () => ({ opened: false, landed: null, seen: 0, newest: 0, more: false, window: WINDOW, first: null, above: null,
  whole: false, reading: false, triedAt: 0 });
const scroll = { conv: null, ...fresh() };
export async function load(r) {
  const key = `${r.machine}/${r.agent}/${r.conversation}`;
  if (scroll.conv !== key) {  // a new conversation: its own status line, opened at its newest
    Object.assign(scroll, { conv: key, ...fresh() });
    editorNote = ""; confirmClose = false; renaming = false; blockedBy = null;
  }
  if (r.ask && scroll.landed !== r.ask) scroll.landed = null;
  app.loading = true;
  try { await read(r); } finally { app.loading = false; }
}
// Issue 39: a chat opens with one read of its newest page (what the screen draws); the pages above it are
// read when the user asks (`Show earlier messages`). The live channel is told the view once this read is in,
// with the revision it holds the items up to: it then sends only what changed since.
// Issue 36: the history is whole once such a read went through: a read the lead could not make (its machine
// asleep: `reason`, or the kept offline copy) leaves it to be read again once the machine is back.
const readable = (page) => page && !page.error && !page.reason && !page[STALE];
function addMissing(items) {  // what the channel already sent is as new as what a read finds, or newer
  setItems((items || []).filter((it) => !app.items.has(`${it.kind === "gap" ? "g" : ""}${it.seq}`)), false);
}
async function read(r) {
  const base = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}`;
  try {
    const [pane, items] = await Promise.all([api(base), api(`${base}/items?newest=${WINDOW}`)]);
    // The live channel sends this view's pane and items too, then every change after them. Once it has,
    // what these requests read may be older than what it sent: keep the channel's (else a change that came
    // between would be lost until the next one), adding only what it did not send.
    if (!app.fromChannel.pane) app.pane = pane && pane.error ? null : pane;
    if (items && Array.isArray(items.items)) {
      if (!app.fromChannel.items) setItems(items.items, true, items.earlier ?? null);
      else addMissing(items.items);
    }
    if (items && Number.isInteger(items.next_since) && (app.itemsSince === null || items.next_since > app.itemsSince)) app.itemsSince = items.next_since;
    if (app.route === r) scroll.whole = readable(items);
  } finally { if (app.route === r) pushView(); }
}
async function readEarlier(r) {
  const base = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}`;
  const page = await api(`${base}/items?newest=${WINDOW}&before=${app.itemsEarlier}`);
  if (app.route === r && page && Array.isArray(page.items)) olderItems(page);
}
// Read the history again when it was not whole and the conversation's machine answers (at most every 2 s).
function readAgain(r, p) {
  if (scroll.whole || scroll.reading || p.online === false || Date.now() - scroll.triedAt < 2000) return;
  const conv = scroll.conv;
  scroll.reading = true; scroll.triedAt = Date.now();
  read(r).catch(() => {}).finally(() => {
    if (scroll.conv !== conv) return;
    scroll.reading = false;
    if (app.route === r) { render(); if (!scroll.whole) setTimeout(() => { if (app.route === r && app.pane) readAgain(r, app.pane); }, 2000); }
  });
}
function mineNode(m) {
  // C3: the clock while sending and once sent (the editor says `Sent`), until the agent's copy takes its place
  const state = m.state === "not_confirmed" ? S.notConfirmed : m.state === "not_sent" ? S.notSent
    : m.state === "queued" ? S.queued : S.clock;
  return h("div", { class: `item mine${m.state === "not_sent" ? " refused" : ""}`, "data-request": m.request_id },
    m.text, h("span", { class: "state", text: state }));
}
// C3: Send and Steer put my line up at once (a small clock). `Sending, not confirmed` keeps the text in the
// editor with its request id: sending the same text again retries under that id, so the agent gets it once.
let unconfirmed = null;  // {kind, text, requestId, conv}
let blockedBy = null;    // B10: the ask that refused the last send (a button jumps to its card)
async function sendText(kind) {
  const r = app.route, p = app.pane;
  const box = document.getElementById("editor");
  const text = box.value;
  if (!text.trim() || !p) return;
  const again = unconfirmed && unconfirmed.kind === kind && unconfirmed.text === text && unconfirmed.conv === r.conversation;
  const requestId = again ? unconfirmed.requestId : rid();
  unconfirmed = null; blockedBy = null;
  for (const [id, m] of app.mine) if (m.state === "not_sent" && m.conv === r.conversation) app.mine.delete(id);
  const base = { request_id: requestId, machine: r.machine, agent: r.agent, conversation: r.conversation, text, turn: p.turn };
  app.mine.set(requestId, { request_id: requestId, text, state: "clock", conv: r.conversation, at: Date.now() });
  box.value = "";
  setEditorNote("");
  toBottom = true;
  render();
  let rec;
  try {
    rec = kind === "send" ? await write("/api/send", base)
      : await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/steer`, base);
  } catch (e) { rec = { outcome: e instanceof Offline ? "offline" : "unknown", lead: e instanceof Unreachable, notSent: e.notSent }; }
  const m = app.mine.get(requestId);
  const editor = () => document.getElementById("editor");
  if (rec.outcome === "refused" || rec.outcome === "offline") {
    if (m) { m.state = "not_sent"; m.at = null; }   // C3: the line stays, `Not sent`
    if (editor()) editor().value = text;             // …and the text goes back into the editor
    if (rec.reason === "turn_moved") app.movedOn = true;
    if (rec.reason === "ask_open" && app.pane && app.pane.ask) blockedBy = app.pane.ask.id;
    setEditorNote(rec.outcome === "offline" ? rec.notSent : `${S.notSent}: ${rec.text || rec.message || rec.reason}`);
  } else if (rec.outcome === "unknown") {
    if (m) m.state = "not_confirmed";
    unconfirmed = { kind, text, requestId, conv: r.conversation };
    if (editor() && !editor().value) editor().value = text;
    setEditorNote(rec.lead ? S.notConfirmedNoLead : S.notConfirmed);
  } else {
    if (m) m.state = rec.outcome === "queued" ? "queued" : "sent";
    // issue 36: `queued, machine offline since 08:28` in the phone's zone, and gone once the machine is back
    const away = rec.outcome === "queued" ? offlineSection(r.machine) : null;
    if (away) setEditorNote(S.queuedOffline(clock(away.offline_since)), r.machine);
    else setEditorNote(rec.message || (rec.outcome === "queued" ? rec.text || S.queued : S.sent));
  }
  render();
}
let editorNote = "", noteTimer = null, noteOffline = null;
// The status line speaks of the last tap; a plain `Sent` or `queued` goes after a while so it never goes stale,
// and one that says the machine is offline goes when it is back (`offline`: that machine)
function setEditorNote(t, offline = null) {
  editorNote = t || ""; noteOffline = offline;
  const n = document.getElementById("editor-note");
  if (n) n.textContent = editorNote;
  clearTimeout(noteTimer);
  if ([S.sent, S.queued].includes(editorNote)) noteTimer = setTimeout(() => { if (editorNote === t) setEditorNote(""); }, 8000);
}
async function sessionWrite(op, extra = {}) {
  const r = app.route, p = app.pane;
  if (!p) return null;
  const path = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}/${op}`;
  let rec;
  try { rec = await write(path, { request_id: rid(), turn: p.turn, ...extra }); }
  catch (e) { setEditorNote(e instanceof Offline ? e.nothing : S.uncertainNoLead); render(); return null; }
  if (rec.outcome === "refused" && rec.reason === "turn_moved") { app.movedOn = true; setEditorNote(S.movedOn); }
  else setEditorNote(rec.message || rec.text || rec.outcome);
  render();
  return rec;
}
let confirmClose = false, renaming = false, toBottom = false;
async function showEarlier() {
  const r = app.route;
  if (scroll.first !== null && !heldAbove() && app.itemsEarlier !== null) {  // the page above is the lead's to give
    try { await readEarlier(r); } catch (_) { return; }
    if (app.route !== r) return;
  }
  const from = document.documentElement.scrollHeight - window.scrollY;
  scroll.window += WINDOW;
  scroll.first = heldFirstAbove();
  keepFromBottom = from;
  render();
}
// the items held above the first one drawn (the window widens over them first)
const sortedSeqs = () => [...app.items.values()].map((i) => i.seq).sort((a, b) => a - b);
function heldAbove() { return sortedSeqs().some((s) => s < scroll.first); }
function heldFirstAbove() {
  const seqs = sortedSeqs(), at = seqs.findIndex((s) => s >= scroll.first);
  return seqs.length ? seqs[Math.max(0, (at < 0 ? seqs.length : at) - WINDOW)] : null;
}
let keepFromBottom = null;
const atBottom = () => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 48;
function goTo(askId) {
  const el = document.querySelector(`.card[data-ask="${CSS.escape(askId)}"]`);
  if (el) el.scrollIntoView({ block: "center" });
}
function actionBar(r, p) {
  const c = p.controls || {};
  const dim = app.movedOn;
  const running = p.state === "working" || p.state === "waiting";
  // C7: every button the conversation has keeps its place; one that cannot act now is dimmed and off
  const known = (p.actions && p.actions.length ? p.actions : app.lastActions.get(scroll.conv) || []).slice(0, 4);
  if (p.actions && p.actions.length) app.lastActions.set(scroll.conv, p.actions);
  const off = (can) => !can || dim;
  const actions = known.map((a) => {
    const label = String(a.label || "").slice(0, 16);
    const no = off(c.actions) || a.disabled || a.busy;
    return h("button", { class: `act${a.busy ? " busy" : ""}${no && !a.busy ? " dim" : ""}`, disabled: no,
      "aria-label": a.label, title: a.label, onclick: () => sessionWrite(`actions/${enc(a.id)}`) }, icon(a.icon), h("span", { text: label }));
  });
  const steerable = (p.caps || []).includes("steer"), stoppable = (p.caps || []).includes("abort");
  const sendable = (p.caps || []).includes("send");  // W4: no composer for an agent that did not declare `send`
  const editor = h("textarea", { id: "editor", rows: 1, "aria-label": S.message, placeholder: S.message,
    oninput: (e) => grow(e.target) });
  const jump = blockedBy ? h("button", { class: "jump", onclick: () => goTo(blockedBy), text: S.goToAsk }) : null;
  return [h("div", { class: "bar" }, h("div", { class: "inner" },
    h("div", { class: "actions" },
      h("button", { class: `act${off(c.steer && running) ? " dim" : ""}`, disabled: off(c.steer && running), hidden: !steerable && !c.steer,
        onclick: () => sendText("steer") }, h("span", { text: S.steer })),
      h("button", { class: `act${off(c.stop && running) ? " dim" : ""}`, disabled: off(c.stop && running), hidden: !stoppable && !c.stop,
        onclick: () => sessionWrite("stop") }, h("span", { text: S.stop })),
      actions),
    h("div", { class: "editor", hidden: !sendable && !steerable }, editor,
      h("button", { class: "primary", disabled: !c.send, hidden: !sendable, onclick: () => sendText("send"), text: S.send })),
    h("div", { id: "editor-note", class: "note", role: "status" }, editorNote, jump))), editor];
}
// The first item wholly or partly below the header: the one the user is reading.
function readingNode() {
  const top = document.querySelector("header.top").getBoundingClientRect().bottom;
  for (const el of document.querySelectorAll(".items > *")) if (el.getBoundingClientRect().bottom > top) return el;
  return null;
}
function keyed(node, key) { node.dataset.key = key; return node; }
function grow(box) { box.style.height = "auto"; box.style.height = `${Math.min(box.scrollHeight + 2, 160)}px`; }
const menus = new Map();  // conversation -> {rename, close}: the header's buttons it had, kept while its machine is offline
function menu(r, p) {
  const c = p.controls || {};
  // like the action bar (C7), a button that cannot act now (its machine asleep) is dimmed in place: the
  // row does not come and go, so the chat does not jump when a machine sleeps or wakes (issue 36)
  const had = menus.get(scroll.conv) || {};
  if (c.rename || c.close) menus.set(scroll.conv, { rename: !!c.rename || had.rename, close: !!c.close || had.close });
  const base = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}`;
  const kids = [];
  if (!c.rename && had.rename) kids.push(h("button", { class: "dim", disabled: true, text: S.rename }));
  if (c.rename && !renaming) kids.push(h("button", { onclick: () => { renaming = true; render(); }, text: S.rename }));
  if (c.rename && renaming) {
    const box = h("input", { type: "text", "aria-label": S.renameTo, maxlength: 200, value: p.title || "" });
    kids.push(box, h("button", { class: "primary", text: S.save, onclick: async () => {
      if (!box.value.trim()) return;
      renaming = false;
      await sessionWrite("rename", { title: box.value.trim() });
    } }), h("button", { text: S.cancelEdit, onclick: () => { renaming = false; render(); } }));
  }
  const turns = app.push.turns;  // issue 37: a turn-end push for this conversation, on or off
  if (turns) {
    const on = turnsOn(turns, r.machine, r.agent, r.conversation);
    kids.push(h("label", { class: "toggle", for: "turns-here", "data-key": `turns:${on}` },
      h("input", { type: "checkbox", id: "turns-here", checked: on,
        onchange: (e) => setTurns({ machine: r.machine, agent: r.agent, conversation: r.conversation, on: e.target.checked })
          .then(render) }), S.notifyTurnsHere));
  }
  if (c.close) kids.push(h("button", { class: confirmClose ? "danger" : "", text: confirmClose ? S.tapAgainClose : S.closeConversation,
    onclick: async () => {
      if (!confirmClose) { confirmClose = true; render(); setTimeout(() => { if (confirmClose) { confirmClose = false; render(); } }, 5000); return; }
      confirmClose = false;
      let rec;
      try { rec = await write(`${base}/close`, { request_id: rid() }); }
      catch (e) { return setEditorNote(e instanceof Offline ? e.nothing : S.uncertainNoLead); }
      if (rec.outcome === "done") location.hash = `#/a/${enc(r.machine)}/${enc(r.agent)}`; else setEditorNote(rec.text || rec.outcome);
    } }));
  else if (had.close) kids.push(h("button", { class: "dim", disabled: true, text: S.closeConversation }));
  return h("div", { class: "menu" }, kids);
}
export function render() {
  const r = app.route, p = app.pane;
  if (!r || r.name !== "chat") return;
  if (!p && app.loading) return;  // the pane of this view is on its way
  const notice = agentNotice(r.machine, r.agent);
  if (noteOffline && !offlineSection(noteOffline)) setEditorNote("");
  if (p && !app.loading) readAgain(r, p);
  if (!p) {
    where(r.agent);
    return show(notice ? h("p", { class: "warning", role: "status", text: notice }) : null,
      h("p", { class: "muted", text: S.notOpen }));
  }
  const before = document.getElementById("editor");
  let draft = before ? before.value : "";
  const focused = document.activeElement && document.activeElement.id === "editor";
  const follow = keepFromBottom === null && (toBottom || !scroll.opened || atBottom());
  toBottom = false;
  where(`${r.agent}${r.machine !== "local" ? " · " + r.machine : ""}`);
  if (r.ask && scroll.landed !== r.ask && (p.asks_more || []).some((a) => a.id === r.ask)) app.allAsks = true;
  const asks = (p.asks || []).concat(app.allAsks ? p.asks_more || [] : []);  // Q8: first 5, the rest on a tap
  // A card stays while it has something to say (on its way, Retry, the agent's word, what the user chose:
  // askcard.keptCard) and, Q3, after its ask expired: the buttons stay, and a late tap is answered
  // `Timed out before an answer.` Each is drawn where its ask was, under its tool call.
  const open = new Set(asks.concat(p.asks_more || []).map((a) => a.id));
  const gone = [];
  for (const [id, st] of app.cards) if (!open.has(id) && keptCard(st)) gone.push(st.ask);
  for (const [id, a] of app.expired) if (!open.has(id) && !app.cards.has(id)) gone.push(a);
  const byItem = new Map();
  for (const a of asks.concat(gone)) { const k = a.item_id || `tool:${a.tool_call_id}`; if (!byItem.has(k)) byItem.set(k, []); byItem.get(k).push(a); }
  const placed = new Set();
  const all = [...app.items.values()].sort((a, b) => (a.seq - b.seq) || (a.kind === "gap" ? -1 : 1));
  let start = follow || scroll.first === null ? -1 : all.findIndex((i) => i.seq >= scroll.first);
  if (start < 0) start = Math.max(0, all.length - scroll.window);
  const items = all.slice(start, start + scroll.window);
  const earlier = start;
  scroll.first = items.length ? items[0].seq : null;
  const echoed = new Set(all.filter((i) => i.kind === "user" && i.request_id).map((i) => i.request_id));
  const list = [];
  if (earlier > 0 || app.itemsEarlier !== null) list.push(h("button", { class: "row earlier", "data-key": "earlier", onclick: showEarlier,
    text: earlier > 0 ? S.showEarlier(Math.min(earlier, WINDOW)) : S.showEarlierMore }));
  const cardFor = (a) => { placed.add(a.id); return keyed(askCard(a), `a:${a.id}`); };
  // C2: a reply still growing has a cursor; one whose turn ended since (`stopped`) has none
  const lastEnd = all.reduce((m, it) => (it.kind === "turn_end" ? Math.max(m, it.seq) : m), -1);
  for (const it of items) {
    const node = itemNode(it, it.seq < lastEnd);
    if (node) list.push(keyed(node, `i:${it.id}`));
    const here = (byItem.get(it.id) || []).concat(it.kind === "tool" ? byItem.get(`tool:${it.tool_call_id}`) || [] : []);
    for (const a of here) if (!placed.has(a.id)) list.push(cardFor(a));
  }
  for (const a of asks.concat(gone)) if (!placed.has(a.id)) list.push(cardFor(a));
  if (p.more_asks && !app.allAsks) list.push(h("button", { class: "row more-asks", "data-key": "more-asks", onclick: () => { app.allAsks = true; render(); },
    text: S.showMore(p.more_asks) }));
  if (blockedBy && !open.has(blockedBy)) blockedBy = null;
  // C3: my own lines until the agent's copy arrives (the lead's recent sends, then this page's own)
  const recent = new Map((p.recent_sends || []).map((m) => [m.request_id, m]));
  for (const [id, m] of app.mine) if (m.conv === r.conversation && (!recent.has(id) || m.state === "not_sent")) recent.set(id, m);
  if (unconfirmed && echoed.has(unconfirmed.requestId)) {  // B3: the agent wrote it into the session: it arrived
    if (draft === unconfirmed.text) draft = "";
    const m = app.mine.get(unconfirmed.requestId);
    if (m) m.state = "sent";
    unconfirmed = null;
    editorNote = S.sent;
  }
  const byText = all.filter((i) => i.kind === "user" && !i.request_id);
  const lastAt = all.length ? new Date(all[all.length - 1].at).getTime() || 0 : 0;
  let ownSent = false;  // C5: your line is the newest and the agent took it: working, even before it echoes it
  for (const [id, m] of recent) {
    if (echoed.has(id)) continue;
    const same = m.at ? byText.findIndex((i) => i.text === m.text && Math.abs(new Date(i.at).getTime() - m.at) <= 30000) : -1;
    if (same >= 0) { byText.splice(same, 1); continue; }  // C4: matched by identical text within 30 s
    if (m.at && Date.now() - m.at > 10 * 60 * 1000) continue;      // C4: never echoed, gone after 10 minutes
    list.push(keyed(mineNode(m), `m:${id}`));
    if (m.state === "sent" && m.at && m.at >= lastAt) ownSent = true;
  }
  const last = items[items.length - 1];
  if ((p.state === "working" && (!last || last.kind === "user")) || (ownSent && p.state !== "waiting")) list.push(h("div", { class: "working", "data-key": "working", "aria-label": S.working, text: "•••" }));
  const [bar, editor] = actionBar(r, p);
  editor.value = draft;
  const newest = all.length ? all[all.length - 1].seq : 0;
  const grew = scroll.opened && (list.length > scroll.seen || newest > scroll.newest);
  scroll.seen = list.length; scroll.newest = newest;
  if (follow) scroll.more = false; else if (grew) scroll.more = true;
  const more = scroll.more ? h("button", { class: "new-items", "data-key": "more", onclick: () => { scroll.more = false; toBottom = true; render(); }, text: S.newItems }) : null;
  // This chat already on screen is drawn over in place: what draws the same stays the same node (dom.js keep)
  const screen = `chat:${scroll.conv}`, view = $view();
  const oldEditor = view.dataset.screen === screen && document.getElementById("editor");
  // what the user reads stays where it is when something comes or goes above it (a notice, the menu row)
  const anchor = !follow && keepFromBottom === null && view.dataset.screen === screen ? readingNode() : null;
  const anchorTop = anchor && anchor.getBoundingClientRect().top;
  if (oldEditor) editor.style.height = oldEditor.style.height;  // grow() sets it once drawn
  const drawn = redraw(screen, [keyed(h("h1", {}, p.title || S.untitled, h("span", { class: "badge", text: S.experimental })), "title"),
    p.line2 ? h("p", { class: "header2", "data-key": "line2", text: p.line2 }) : null,
    notice ? h("p", { class: "warning", "data-key": "notice", role: "status", text: notice }) : null, keyed(menu(r, p), "menu"),
    h("div", { class: "items", "data-key": "items", "data-deep": "" }, list), more, keyed(bar, "bar")]);
  if (!drawn) view.classList.add("chat");
  const ed = document.getElementById("editor");
  if (ed.value !== draft) ed.value = draft;
  grow(ed);
  document.documentElement.style.setProperty("--bar", `${view.querySelector(":scope > .bar").offsetHeight}px`);
  if (focused && document.activeElement !== ed) ed.focus({ preventScroll: true });
  if (anchor && anchor.isConnected) {
    const moved = anchor.getBoundingClientRect().top - anchorTop;
    if (Math.abs(moved) >= 1) window.scrollBy(0, moved);
  }
  if (keepFromBottom !== null) {  // the earlier page went in above: what was on screen stays where it was
    window.scrollTo(0, document.documentElement.scrollHeight - keepFromBottom);
    keepFromBottom = null;
  } else if (r.ask && scroll.landed !== r.ask && document.querySelector(`.card[data-ask="${CSS.escape(r.ask)}"]`)) {
    scroll.landed = r.ask; scroll.opened = true; goTo(r.ask);    // a Needs you tap lands on its card
  } else if (follow) {
    window.scrollTo(0, document.documentElement.scrollHeight);
    if (items.length || !scroll.opened) scroll.opened = items.length > 0 || scroll.opened;
  }
}
