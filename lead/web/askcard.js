// The ask card (Q, O, R): one card per open ask, its answer sent once, its outcome in Collie's words.
import { S } from "./strings.js";
import { h, enc, rid, clock } from "./dom.js";
import { write, Offline } from "./api.js";
import { app, rerender, offlineSection } from "./state.js";

const ARMED_MS = 5000;  // Q5: `Tap again to always allow` turns back after this long without the second tap
export function countdown(ask) {
  if (!ask.expires_at) return null;
  const left = Math.round((new Date(ask.expires_at).getTime() - Date.now()) / 1000);
  if (left <= 0) return S.expired;
  return left >= 60 ? S.expiresMin(Math.ceil(left / 60)) : S.expiresSec(left);
}
// What the user chose, in one line: `You allowed · deploy` (the card collapses to it once the agent took it).
function chosen(ask, payload) {
  if (!payload) return null;
  const label = (id) => ((ask.options || []).find((o) => o.id === id) || {});
  if (ask.kind === "permission") {
    const o = label((payload.option_ids || [])[0]);
    return S.youDid(S.didRole[o.role] || S.didRole.other, ask.tool || ask.title || "");
  }
  if (ask.kind === "choice") return S.youDid(S.didRole.chose, (payload.option_ids || []).map((id) => label(id).label || id).join(", ") || S.nothingPicked);
  if (ask.kind === "text") return S.youDid(S.didRole.answered, payload.text || "");
  return S.youDid(S.didRole.sent, ask.title || "");
}
export async function answer(ask, payload, { confirmed = false, retry = false } = {}) {
  const r = app.route;
  const st = app.cards.get(ask.id) || {};
  const requestId = retry && st.requestId ? st.requestId : rid();
  const body = retry && st.body ? st.body : { request_id: requestId, machine: r.machine, agent: r.agent,
    digest: ask.digest, answer: payload, confirmed };
  const choice = retry ? st.choice : chosen(ask, payload);
  app.cards.set(ask.id, { ...st, ask, requestId, body, choice, pending: true, outcome: null, text: null, offline: null });
  rerender();
  let rec;
  try { rec = await write(`/api/ask/${enc(ask.id)}`, body); }
  catch (e) { rec = e instanceof Offline ? { outcome: "offline", text: e.nothing } : { outcome: "unknown", text: S.notCertain }; }
  // issue 36: the machine's offline time in the phone's zone (the lead words it in its own), and the
  // sentence goes once the machine is back (askCard)
  const away = rec.reason === "machine_offline" ? offlineSection(r.machine) : null;
  const next = { ...app.cards.get(ask.id), pending: false, outcome: rec.outcome, armed: false,
    text: away ? S.machineIsOffline(away.label || r.machine, clock(away.offline_since)) : rec.text,
    offline: away ? r.machine : null, retry: rec.outcome === "unknown" };
  if (rec.outcome === "changed" && rec.current_ask && app.pane) {
    const i = (app.pane.asks || []).findIndex((a) => a.id === ask.id);
    if (i >= 0) app.pane.asks[i] = rec.current_ask;
  }
  app.cards.set(ask.id, next);
  rerender();
}
// A card stays after its ask closed only while it has something to say: on its way, uncertain (Retry),
// the agent's own word (decided, expired…), or the collapsed line of what the user chose. A refusal of the
// phone's or the lead's (offline, refused) says nothing once the ask is gone: no stale card with a live Send.
export function keptCard(st) {
  return !!st.ask && (st.pending || st.retry || st.outcome === "accepted" || locks(st));
}
const locks = (st) => st.outcome && !["unknown", "changed", "refused", "invalid", "offline", "accepted"].includes(st.outcome);
export function askCard(ask) {
  let st = app.cards.get(ask.id) || {};
  if (st.offline && !offlineSection(st.offline)) {  // the machine is back: what it said is no longer true
    st = { ...st, offline: null, outcome: null, text: null };
    app.cards.set(ask.id, st);
  }
  if (st.outcome === "accepted" && st.choice) {
    return h("div", { class: "card answered", "data-ask": ask.id, role: "status", "aria-label": ask.title, text: st.choice });
  }
  const agent = app.route.agent;
  const locked = locks(st);
  const kids = [h("div", { class: "head", text: S.needsAnswer(agent) }), h("div", { class: "title", text: ask.title })];
  const cd = countdown(ask);
  if (cd) kids.push(h("div", { class: "note", "data-expiry": ask.expires_at, "data-live": "", text: cd }));
  if (ask.body) kids.push(h("div", { text: ask.body }));
  if (ask.shortened || ask.text_shortened) kids.push(h("div", { class: "note", text: S.textShortened }));
  const dis = st.pending || locked;
  if (!ask.answerable) kids.push(h("div", { class: "note", text: S.cannotAnswer }));
  else if (ask.kind === "permission" || (ask.kind === "choice" && !ask.multiple)) {
    // Q4: a permission option speaks Collie's words by its role, the agent's own label a faint second line
    // (an agent could label its allow option "Not now"); a choice option is the agent's label alone.
    const words = (o, text) => ask.kind === "permission" && S.roles[o.role]
      ? [h("span", { class: "role", text: text || S.roles[o.role] }), o.label ? h("span", { class: "agent-label", text: o.label }) : null]
      : [h("span", { class: "role", text: text || o.label || "" })];
    const opts = (ask.options || []).filter((o) => o.role !== "always_allow" || ask.always_allow).map((o) => {
      if (o.role === "always_allow") {
        const armed = st.armed;
        return h("button", { disabled: dis, class: `opt${armed ? " primary" : ""}`, onclick: () => {
          if (!armed) {  // Q5: armed for 5 s, in the same place (the options are a grid: nothing moves)
            app.cards.set(ask.id, { ...st, ask, armed: true }); rerender();
            setTimeout(() => { const now = app.cards.get(ask.id); if (now && now.armed) { app.cards.set(ask.id, { ...now, armed: false }); rerender(); } }, ARMED_MS);
          }
          else answer(ask, { option_ids: [o.id] }, { confirmed: true });
        } }, words(o, armed ? `${S.tapAgain} ${ask.tool || ""}`.trim() : null));
      }
      return h("button", { disabled: dis, class: `opt${o.role === "allow" ? " primary" : ""}`,
        onclick: () => answer(ask, { option_ids: [o.id] }) }, words(o));
    });
    kids.push(h("div", { class: "opts" }, opts));
  } else if (ask.kind === "choice") {
    const boxes = (ask.options || []).map((o) => h("label", { class: "toggle" },
      h("input", { type: "checkbox", value: o.id, disabled: dis }), o.label));
    kids.push(h("div", { class: "note", text: S.pickAny }), ...boxes,
      h("button", { class: "primary", disabled: dis, onclick: (e) => {
        const ids = [...e.target.closest(".card").querySelectorAll("input:checked")].map((x) => x.value);
        answer(ask, { option_ids: ids });
      }, text: S.send }));
  } else if (ask.kind === "text") {
    const max = ask.max_length || 500;
    const counter = h("div", { class: "note", "data-live": "", text: S.counter(0, max) });
    const send = h("button", { class: "primary", disabled: dis, onclick: () => answer(ask, { text: input.value }), text: S.send });
    const input = h("input", { type: "text", maxlength: max, placeholder: ask.placeholder || "", disabled: dis,
      "aria-label": ask.title, enterkeyhint: "send", oninput: (e) => { counter.textContent = S.counter(e.target.value.length, max); },
      onkeydown: (e) => { if (e.key === "Enter" && !e.isComposing) { e.preventDefault(); send.click(); } } });
    kids.push(input, counter, send);
  } else if (ask.kind === "form") {
    const inputs = [];
    for (const f of ask.fields || []) {
      const id = `f-${ask.id}-${f.id}`;
      let input;
      if (f.type === "toggle") input = h("input", { type: "checkbox", id, checked: !!f.default, disabled: dis });
      else if (f.type === "select") input = h("select", { id, disabled: dis }, h("option", { value: "", text: "" }),
        (f.options || []).map((o) => h("option", { value: o.id, text: o.label })));
      else input = h("input", { type: "text", id, maxlength: f.max_length || 500, disabled: dis });
      inputs.push([f, input]);
      kids.push(h("label", { for: id, class: f.type === "toggle" ? "toggle" : "" }, f.type === "toggle" ? input : null, f.label,
        f.required ? h("span", { class: "note", text: ` ${S.required}` }) : null), f.type === "toggle" ? null : input);
    }
    kids.push(h("button", { class: "primary", disabled: dis, onclick: () => {
      const fields = {};
      for (const [f, input] of inputs) fields[f.id] = f.type === "toggle" ? input.checked : input.value;
      answer(ask, { fields });
    }, text: S.send }));
  } else kids.push(h("div", { class: "note", text: S.cannotAnswer }));
  if (st.text) kids.push(h("div", { class: "outcome", role: "status", text: st.text }));
  if (st.retry) kids.push(h("button", { onclick: () => answer(ask, null, { retry: true }), text: S.retry }));
  return h("div", { class: `card${locked ? " locked" : ""}`, "data-ask": ask.id, role: "group", "aria-label": ask.title }, kids);
}
