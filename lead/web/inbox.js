// An agent's inbox (I3, I7, I9): waiting requests to approve, move, add a message to or cancel. Clearing
// asks for a second tap; the Cancel beside a message being added cancels that edit, not the request.
import { S } from "./strings.js";
import { h, show, where, enc, clock } from "./dom.js";
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
        oninput: (e) => { editing.text = e.target.value; } });
      btns = h("div", { class: "btns" }, box,
        h("button", { class: "primary", text: S.add, onclick: () => {
          if (!box.value.trim()) return;
          const text = box.value; editing = null; act(it.id, "message", { text });
        } }),
        h("button", { text: S.cancelEdit, onclick: () => { editing = null; render(r); } }));
      queueMicrotask(() => box.isConnected && box.focus());
    } else if (waiting(it)) {
      btns = h("div", { class: "btns" },
        it.state === "pending" ? h("button", { class: "primary", onclick: () => act(it.id, "approve"), text: S.approve }) : null,
        i > 0 ? h("button", { "aria-label": S.moveUp, onclick: () => act(it.id, "move", { index: i - 1 }), text: "↑" }) : null,
        i < queue.length - 1 ? h("button", { "aria-label": S.moveDown, onclick: () => act(it.id, "move", { index: i + 1 }), text: "↓" }) : null,
        it.kind === "send" ? h("button", { onclick: () => { editing = { id: it.id, text: "" }; render(r); }, text: S.addMessage }) : null,
        h("button", { onclick: () => act(it.id, "cancel"), text: S.cancel }));
    }
    const what = it.text || (it.starter ? `${S.starter} ${it.starter}` : "");
    // the lead words `machine offline since HH:MM` in its own zone; the phone says it in the phone's (C9)
    const stateText = it.offline_since_at && clock(it.offline_since_at) ? S.queuedOffline(clock(it.offline_since_at)) : it.state_text;
    const state = [stateText || it.state || "", it.sender ? `${S.from} ${it.sender}` : ""].filter(Boolean).join(" · ");
    return h("div", { class: "inbox-item", "data-item": it.id },
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
  show(h("h1", { text: S.inbox }), items.length ? null : h("p", { class: "muted", text: S.inboxEmpty }),
    ...queue.map(row), clear, note ? h("p", { class: "note", role: "status", text: note }) : null,
    rest.length ? h("h2", { text: S.inboxDone }) : null, ...rest.map(row));
}
export const load = render;
