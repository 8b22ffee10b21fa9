// An agent's inbox (I3, I7, I9): waiting requests to approve, move, add a message to or cancel.
import { S } from "./strings.js";
import { h, show, where, enc } from "./dom.js";
import { api, write } from "./api.js";
import { app } from "./state.js";

export const drawsItself = true;
export async function render(r = app.route) {
  where(`${r.agent} · ${S.inbox}`);
  const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/inbox`);
  const act = (id, op, body = {}) => write(`/api/inbox/${enc(id)}/${op}`, body).then(render);
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
    queue.length ? h("button", { onclick: () => write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/inbox/clear`, {}).then(render), text: S.clearInbox }) : null,
    rest.length ? h("h2", { text: S.inboxDone }) : null, ...rest.map(row));
}

export const load = render;
