// New conversation (N1–N3): the agent's starters; a tap starts one and opens its chat.
import { S } from "./strings.js";
import { h, show, where, enc, rid } from "./dom.js";
import { api, write, Offline } from "./api.js";
import { agentNotice } from "./state.js";

export const drawsItself = true;
export async function render(r) {
  where(r.agent);
  const got = await api(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/starters`);
  const note = h("p", { class: "note", role: "status" });
  const rows = (got.starters || []).map((s) => h("li", {}, h("button", { class: "row", onclick: async () => {
    let rec;
    try { rec = await write(`/api/agents/${enc(r.machine)}/${enc(r.agent)}/starters/${enc(s.id)}`, { request_id: rid() }); }
    catch (e) { note.textContent = e instanceof Offline ? e.nothing : S.uncertainNoLead; return; }
    if (rec.outcome === "started" && rec.conversation) location.hash = `#/c/${enc(r.machine)}/${enc(r.agent)}/${enc(rec.conversation)}`;
    else note.textContent = rec.text || rec.message || rec.outcome || "";
  } }, h("span", { class: "main" }, h("div", { class: "l1", text: s.label || s.id || "" })))));
  const notice = agentNotice(r.machine, r.agent);
  show(h("h1", { text: got.title || S.newConversation }), notice ? h("p", { class: "warning", role: "status", text: notice }) : null,
    got.empty ? h("p", { class: "muted", text: got.empty }) : null,
    h("ul", { class: "rows" }, rows), note);
}
export const load = render;
