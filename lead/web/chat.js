// The chat (C1–C9): a conversation's items with its ask cards, my own lines, the action bar and editor.
import { S, ICONS } from "./strings.js";
import { h, show, where, enc, rid } from "./dom.js";
import { api, write } from "./api.js";
import { app, setItems } from "./state.js";
import { itemNode } from "./items.js";
import { askCard } from "./askcard.js";

export async function load(r) {
  app.loading = true;
  try { await read(r); } finally { app.loading = false; }
}
async function read(r) {
  const base = `/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations/${enc(r.conversation)}`;
  const [pane, items] = await Promise.all([api(base), api(`${base}/items`)]);
  // The live channel sends this view's pane and items too, then every change after them. Once it has,
  // what these requests read may be older than what it sent: keep the channel's (else a change that came
  // between would be lost until the next one).
  if (!app.fromChannel.pane) app.pane = pane && pane.error ? null : pane;
  if (!app.fromChannel.items) setItems((items && items.items) || [], true);
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
  render();
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
  render();
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
  render();
}
export function render() {
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
  if (p.more_asks && !app.allAsks) list.push(h("button", { class: "row more-asks", onclick: () => { app.allAsks = true; render(); },
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

