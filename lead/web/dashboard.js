// The dashboard (D1–D5): the Needs you list above one Durable agents section per machine.
import { S } from "./strings.js";
import { h, redraw, where, enc, ago, clock } from "./dom.js";
import { app, loadDashboard } from "./state.js";

function approvalsOf(machine, agent) {
  const a = app.approvals.find((x) => x.machine === machine && x.agent === agent);
  return a ? a.count : 0;
}
function agentRow(machine, a) {
  const ready = a.status === "ready";
  const approvals = approvalsOf(machine, a.name);
  const pending = approvals ? h("span", { class: "count-approve", "aria-label": S.approvalsLabel(approvals), text: `+${approvals}` }) : null;
  const right = ready
    ? h("span", { class: "right" }, h("span", { "aria-label": S.openLabel(a.open ?? 0) }, String(a.open ?? 0)),
      a.waiting ? h("span", { class: "count-needs", "aria-label": S.waitingLabel(a.waiting) }, String(a.waiting)) : null, pending)
    : h("span", { class: "right status" }, a.status_label || a.status || "", pending);
  // D1: why an agent does not answer, in the user's words (the bridge's detail is for `collie doctor`)
  // (not for a machine that sleeps: its section says so, and its rows keep their height — issue 36)
  const reason = a.status === "unreachable" && a.reason !== "machine-offline" ? h("div", { class: "l2", text: S.unreachableWhy(a.name, a.reason) }) : null;
  return h("li", { "data-key": `a:${a.name}` }, h("a", { class: "row", href: `#/a/${enc(machine)}/${enc(a.name)}` },
    h("span", { class: "main" }, h("div", { class: "l1" }, a.name, h("span", { class: "badge", text: S.experimental })),
      h("div", { class: "l2", text: a.line2 || "" }), reason), right));
}
export function render() {
  where("");
  if (!app.dash) return;
  const nodes = [];
  const approvals = app.approvals.filter((a) => a.count > 0);
  const count = app.needs.length + approvals.length;
  if (count) {
    const where2 = (n) => `${n.agent}${n.machine !== "local" ? " · " + n.machine : ""}`;
    nodes.push(h("section", { class: "section-needs", "aria-labelledby": "needs-h", "data-key": "needs", "data-deep": "" },
      h("h2", { id: "needs-h", "data-key": "h2" }, S.needsYou, h("span", { "aria-label": S.needsCount(count), text: ` (${count})` })),
      h("ul", { class: "rows", "data-key": "rows", "data-deep": "" }, app.needs.map((n) => h("li", { "data-key": `n:${n.machine}/${n.ask}` }, h("a", {
        class: "row", href: `#/c/${enc(n.machine)}/${enc(n.agent)}/${enc(n.conversation)}/${enc(n.ask)}` },
        h("span", { class: "main" }, h("div", { class: "l1", text: n.title || "" }),
          h("div", { class: "l2", text: `${n.conversation_title || S.untitled} · ${where2(n)}` })),
        h("span", { class: "right", text: ago(n.since) })))),
      approvals.map((a) => h("li", { "data-key": `i:${a.machine}/${a.agent}` }, h("a", { class: "row", href: `#/inbox/${enc(a.machine)}/${enc(a.agent)}` },
        h("span", { class: "main" }, h("div", { class: "l1", text: S.approvals(a.count, a.agent) }),
          h("div", { class: "l2", text: `${S.inbox} · ${where2(a)}` }))))))));
  }
  // Issue 36: asks of an agent that is gone (exited, unreachable) wait for nobody: listed apart, not counted
  const gone = app.needsGone || [];
  if (gone.length) {
    nodes.push(h("section", { class: "section-gone", "aria-labelledby": "gone-h", "data-key": "gone", "data-deep": "" },
      h("h2", { id: "gone-h", "data-key": "h2", text: S.needsGone }),
      h("ul", { class: "rows", "data-key": "rows", "data-deep": "" }, gone.map((n) => h("li", { "data-key": `g:${n.machine}/${n.ask}` }, h("a", {
        class: "row", href: `#/c/${enc(n.machine)}/${enc(n.agent)}/${enc(n.conversation)}` },
        h("span", { class: "main" }, h("div", { class: "l1", text: n.title || "" }),
          h("div", { class: "l2", text: S.unreachableWhy(n.agent, n.reason) }))))))));
  }
  const toggle = h("input", { type: "checkbox", id: "only", checked: app.onlyNeeds,
    onchange: (e) => { app.onlyNeeds = e.target.checked; localStorage.setItem("onlyNeeds", app.onlyNeeds ? "1" : "0"); render(); } });
  nodes.push(h("label", { class: "toggle", for: "only", "data-key": "only" }, toggle, S.onlyNeedsYou));
  if (app.push.offer) nodes.push(h("button", { id: "push", "data-key": "push", text: S.notifyOn,
    onclick: () => import("./push.js").then((m) => m.turnOnPush()).then(render) }));
  const turns = app.push.turns;  // issue 37: this phone, every conversation
  if (turns) nodes.push(h("label", { class: "toggle", for: "turns", "data-key": `turns:${turns.all}` },
    h("input", { type: "checkbox", id: "turns", checked: turns.all,
      onchange: (e) => import("./push.js").then((m) => m.setTurns({ all: e.target.checked })).then(render) }), S.notifyTurns));
  if (app.push.cannot) nodes.push(h("p", { class: "note", id: "push-cannot", "data-key": "push-cannot" }, app.push.cannot.text,
    app.push.cannot.link ? [" ", h("a", { href: app.push.cannot.link, text: S.pushTrustLink })] : null));
  if (app.push.note) nodes.push(h("p", { class: "note", role: "status", text: app.push.note }));
  // D2, D5: a section with an agent waiting for you moves above the others
  const sections = [...app.dash.sections].sort((a, b) => (b.waiting ? 1 : 0) - (a.waiting ? 1 : 0));
  for (const s of sections) {
    const rows = s.agents.filter((a) => !app.onlyNeeds || a.waiting);
    if (!rows.length) continue;
    const title = s.label ? `${S.durableAgents} · ${s.label}` : S.durableAgents;
    nodes.push(h("section", { class: s.waiting ? "section-needs" : "", "data-machine": s.machine, "data-key": `m:${s.machine}`, "data-deep": "" },
      // a member's section always has its state line (`online` / `offline since 08:28`): nothing moves when it sleeps or wakes
      h("h2", { "data-key": "h2" }, title, s.machine !== "local" ? h("span", { class: "note machine-state",
        text: s.online === false ? S.machineOffline(clock(s.offline_since)) : S.machineOnline }) : null),
      h("ul", { class: "rows", "data-key": "rows", "data-deep": "" }, rows.map((a) => agentRow(s.machine, a)))));
  }
  if (!app.dash.sections.length) nodes.push(h("p", { class: "muted", text: S.noAgents }));
  redraw("dash", nodes);  // a row that changed is redrawn alone: a tap on another is not lost
}
export const load = () => loadDashboard();
