// An agent's conversation list (L1–L6) and a closed conversation, read only (L3).
import { S } from "./strings.js";
import { h, show, where, enc, rid, ago } from "./dom.js";
import { api, write, Unpaired } from "./api.js";
import { app, isRoute, showUnpaired } from "./state.js";
import { itemNode } from "./items.js";

export async function load(r) {
  app.convs = null; app.closed = []; app.closedNext = null; app.closedFooter = null; app.closedRead = false;
  await loadConversations(r);
}
async function loadConversations(r) {
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
  if (isRoute("agent")) render(app.route);
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
export function render(r) {
  const d = app.convs;
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

// A closed conversation, read only, with Reopen (L3).
export const closedView = { drawsItself: true, load: renderClosed, render: renderClosed };
async function renderClosed(r) {
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
