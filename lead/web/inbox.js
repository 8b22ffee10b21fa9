// An agent's inbox (I3, I7, I9): waiting requests to approve, move, add a message to or cancel. Clearing
// asks for a second tap; the Cancel beside a message being added cancels that edit, not the request.
import { S } from "./strings.js";
import { h, redraw, where, enc, clock } from "./dom.js";
import { api, write, Offline } from "./api.js";
import { app } from "./state.js";

export const drawsItself = true;
let editing = null;        // {id, text}: the message being added (kept across redraws from the live channel)
let confirmClear = false;  // the first tap on `Clear the inbox` turns it into `Tap again to clear the inbox`
let note = "";
let shownFor = null;
export async function render(r = app.route) {
  const key = `${r.machine}/${r.agent}`;
  if (shownFor !== key) { shownFor = key; editing = null; confirmClear = false; note = ""; }
  where(`${r.agent} · ${S.inbox}`);
  const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/inbox`);
  if (app.route !== r && (app.route.name !== "inbox" || `${app.route.machine}/${app.route.agent}` !== key)) return;
  const act = async (id, op, body = {}) => {
    try { await write(`/api/inbox/${enc(id)}/${op}`, body); note = ""; }
    catch (e) { note = e instanceof Offline ? e.nothing : S.uncertainNoLead; }
    return render(r);
  };
  const items = got.items || [];
  const waiting = (it) => ["pending", "approved"].includes(it.state);
  const queue = items.filter(waiting);  // moves are positions in the waiting queue (I3)
  const row = (it) => {
    const i = queue.indexOf(it);
    let btns = null;
    if (waiting(it) && editing && editing.id === it.id) {
      // I7: the owner (like the sender) may add a message to a send that still waits
      const box = h("input", { type: "text", "aria-label": S.messageToAdd, value: editing.text,
        oninput: (e) => { editing.text = e.target.value; },
        onkeydown: (e) => { if (e.key === "Enter") { e.preventDefault(); add.click(); } } });
      const add = h("button", { class: "primary", text: S.add, onclick: () => {
        if (!box.value.trim()) return;
        const text = box.value; editing = null; act(it.id, "message", { text });
      } });
      btns = h("div", { class: "btns edit" }, box, h("div", { class: "line" }, add,
        h("button", { text: S.cancelEdit, onclick: () => { editing = null; render(r); } })));
      if (editing.fresh) { editing.fresh = false; queueMicrotask(() => box.isConnected && box.focus()); }
    } else if (waiting(it)) {
      // every waiting row has the same buttons in the same places (one that cannot act here is dimmed):
      // approve and move on one line, add a message and cancel on the next
      btns = h("div", { class: "btns" },
        h("div", { class: "line" },
          h("button", { class: it.state === "pending" ? "primary" : "", disabled: it.state !== "pending",
            onclick: () => act(it.id, "approve"), text: it.state === "pending" ? S.approve : S.approved }),
          h("button", { "aria-label": S.moveUp, disabled: i <= 0, onclick: () => act(it.id, "move", { index: i - 1 }), text: "↑" }),
          h("button", { "aria-label": S.moveDown, disabled: i >= queue.length - 1, onclick: () => act(it.id, "move", { index: i + 1 }), text: "↓" })),
        h("div", { class: "line" },
          h("button", { disabled: it.kind !== "send", onclick: () => { editing = { id: it.id, text: "", fresh: true }; render(r); }, text: S.addMessage }),
          h("button", { onclick: () => act(it.id, "cancel"), text: S.cancel })));
    }
    const what = it.text || (it.starter ? `${S.starter} ${it.starter}` : "");
    // the lead words `machine offline since HH:MM` in its own zone; the phone says it in the phone's (C9)
    const stateText = it.offline_since_at && clock(it.offline_since_at) ? S.queuedOffline(clock(it.offline_since_at)) : it.state_text;
    const state = [stateText || it.state || "", it.sender ? `${S.from} ${it.sender}` : ""].filter(Boolean).join(" · ");
    return h("div", { class: "inbox-item", "data-item": it.id, "data-key": `i:${it.id}` },
      h("div", { class: "l1", text: what }), h("div", { class: "l2 note", text: state }), btns);
  };
  const rest = items.filter((it) => !waiting(it));
  const clear = queue.length ? h("button", { class: confirmClear ? "danger" : "", text: confirmClear ? S.tapAgainClear : S.clearInbox,
    onclick: async () => {
      if (!confirmClear) {
        confirmClear = true; render(r);
        setTimeout(() => { if (confirmClear) { confirmClear = false; if (app.route.name === "inbox") render(app.route); } }, 5000);
        return;
      }
      confirmClear = false;
      try { await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/inbox/clear`, {}); note = ""; }
      catch (e) { note = e instanceof Offline ? e.nothing : S.uncertainNoLead; }
      render(r);
    } }) : null;
  // drawn over itself: a message being typed keeps its text, keyboard and caret while items change (issue 36)
  redraw(`inbox:${key}`, [h("h1", { "data-key": "h1", text: S.inbox }),
    queue.length ? null : h("p", { class: "muted", "data-key": "empty", text: S.inboxEmpty }),
    ...queue.map(row), clear && keyedNode(clear, "clear"), note ? h("p", { class: "note", role: "status", "data-key": "note", text: note }) : null,
    rest.length ? h("h2", { "data-key": "done", text: S.inboxDone }) : null, ...rest.map(row)]);
}
function keyedNode(node, key) { node.dataset.key = key; return node; }
export const load = render;
