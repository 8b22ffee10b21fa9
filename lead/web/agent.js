// An agent's conversation list (L1–L6) and a closed conversation, read only (L3).
import { S } from "./strings.js";
import { h, show, where, enc, rid, ago } from "./dom.js";
import { api, write, Unpaired, Offline } from "./api.js";
import { app, isRoute, showUnpaired, agentNotice } from "./state.js";
import { itemNode } from "./items.js";

export async function load(r) {
  app.convs = null; app.closed = []; app.closedNext = null; app.closedFooter = null; app.closedRead = false;
  await loadConversations(r);
}
async function loadConversations(r) {
  app.convs = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations`);
  if (!app.closedRead) { app.closedRead = true; loadClosed(); }
}
// L4: the agent's row changed while its list is shown: read the open list again; the closed one only
// when a conversation opened or closed (the count of open ones moved), never per poll.
let openCount = null;
export async function refresh(r, row) {
  const count = row && typeof row.open === "number" ? row.open : null;
  const moved = count !== null && openCount !== null && count !== openCount;
  if (count !== null) openCount = count;
  try { app.convs = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations`); }
  catch (_) { return; }
  if (moved) { app.closed = []; app.closedNext = null; app.closedFooter = null; await loadClosed(); return; }
  if (isRoute("agent")) render(app.route);
}
async function loadClosed() {
  const r = app.route;
  const q = app.closedNext ? `&cursor=${enc(app.closedNext)}` : "";
  try {
    const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations?closed=1${q}`);
    if (got.reason === "no_history") { app.closedFooter = null; app.closedNext = null; }
    else { app.closed = app.closed.concat(got.closed || []); app.closedNext = got.next; app.closedFooter = got.footer; }
  } catch (e) { if (e instanceof Unpaired) return showUnpaired(); app.closedFooter = S.listFailed; }
  if (isRoute("agent")) render(app.route);
}
function convRow(r, c, closed) {
  const href = closed ? `#/closed/${enc(r.machine)}/${enc(r.agent)}/${enc(c.id)}` : `#/c/${enc(r.machine)}/${enc(r.agent)}/${enc(c.id)}`;
  const mark = closed ? "" : ({ working: "● ", waiting: "◆ ", idle: "" }[c.state] || "");
  return h("li", {}, h("a", { class: "row", href },
    h("span", { class: "main" }, h("div", { class: "l1" }, mark, c.title || S.untitled),
      h("div", { class: "l2", text: c.line || c.subtitle || "" })),
    h("span", { class: "right" }, ago(c.activity || c.closed_at),
      c.waiting_asks ? h("span", { class: "count-needs", "aria-label": S.asksLabel(c.waiting_asks), text: String(c.waiting_asks) }) : null)));
}
export function render(r) {
  const d = app.convs;
  where(r.machine === "local" ? r.agent : `${r.agent} · ${r.machine}`);
  if (!d) return;
  const row = app.dash && (app.dash.sections.find((s) => s.machine === r.machine) || { agents: [] }).agents.find((a) => a.name === r.agent);
  if (row && typeof row.open === "number") openCount = row.open;
  const notice = agentNotice(r.machine, r.agent);
  const nodes = [h("h1", {}, r.agent, h("span", { class: "badge", text: S.experimental }))];
  if (notice) nodes.push(h("p", { class: "warning", role: "status", text: notice }));
  if (d.warning) nodes.push(h("div", { class: "warning", role: "alert", text: d.warning }));
  // W4: a control only for what the agent declared: New conversation needs its `starters`
  const starters = (d.caps || []).includes("starters");
  nodes.push(h("div", { class: "menu" },
    starters ? h("a", { class: "btn", href: `#/new/${enc(r.machine)}/${enc(r.agent)}`, text: S.newConversation }) : null,
    h("a", { class: "btn", href: `#/inbox/${enc(r.machine)}/${enc(r.agent)}`, text: S.inbox })));
  nodes.push(h("ul", { class: "rows", "aria-label": S.openConversations }, (d.open || []).map((c) => convRow(r, c, false))));
  // the lead's view may leave some open conversations out: say how many (a field it may not send yet)
  if (Number.isInteger(d.left_out) && d.left_out > 0) nodes.push(h("p", { class: "footer", text: S.leftOutConvs(d.left_out) }));
  if (app.closed.length) {
    nodes.push(h("h2", { text: S.closed }), h("ul", { class: "rows", "aria-label": S.closed }, app.closed.map((c) => convRow(r, c, true))));
  }
  if (app.closedNext) nodes.push(h("button", { onclick: loadClosed, text: S.loadMore }));
  if (app.closedFooter) nodes.push(h("p", { class: "footer", text: app.closedFooter }));
  show(...nodes);
}

// A closed conversation, read only, titled by its title, with Reopen when the agent declared it (L3, W4).
export const closedView = { drawsItself: true, load: renderClosed, render: renderClosed };
async function titleOf(r) {
  const known = app.closed.find((c) => c.id === r.conversation);
  if (known) return known;
  try {
    const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/conversations?closed=1`);
    return (got.closed || []).find((c) => c.id === r.conversation) || null;
  } catch (_) { return null; }
}
async function renderClosed(r) {
  where(`${r.agent} · ${S.closed}`);
  const base = `/api/agents/${enc(r.machine)}/${enc(r.agent)}`;
  const [got, list, row] = await Promise.all([api(`${base}/conversations/${enc(r.conversation)}/items`),
    api(`${base}/conversations`).catch(() => null), titleOf(r)]);
  const caps = (list && list.caps) || [];
  const note = h("p", { class: "note", role: "status" });
  const reopen = caps.includes("reopen") && caps.includes("history") ? h("button", { onclick: async () => {
    let rec;
    try { rec = await write(`${base}/conversations/${enc(r.conversation)}/reopen`, { request_id: rid() }); }
    catch (e) { note.textContent = e instanceof Offline ? e.nothing : S.uncertainNoLead; return; }
    if (rec.outcome === "done") location.hash = `#/c/${enc(r.machine)}/${enc(r.agent)}/${enc(r.conversation)}`;
    else note.textContent = rec.text || rec.outcome;
  }, text: S.reopen }) : null;
  show(h("h1", {}, (row && row.title) || S.untitled, h("span", { class: "badge", text: S.experimental })),
    row && row.subtitle ? h("p", { class: "header2", text: row.subtitle }) : null, reopen, note,
    got.footer ? h("p", { class: "footer", text: got.footer }) : null,
    h("div", { class: "items" }, (got.items || []).map((it) => itemNode(it, true))));
}
