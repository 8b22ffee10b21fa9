// The dashboard (D1–D5): the Needs you list above one Durable agents section per machine.
import { S } from "./strings.js";
import { h, show, where, enc, ago } from "./dom.js";
import { app, loadDashboard } from "./state.js";
import { pushState, turnOnPush } from "./push.js";

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
export function render() {
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
    onchange: (e) => { app.onlyNeeds = e.target.checked; localStorage.setItem("onlyNeeds", app.onlyNeeds ? "1" : "0"); render(); } });
  nodes.push(h("label", { class: "toggle", for: "only" }, toggle, S.onlyNeedsYou));
  if (pushState.offer) nodes.push(h("button", { id: "push", onclick: () => turnOnPush().then(render), text: S.notifyOn }));
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
export const load = () => loadDashboard();
