// One chat item (C1, C2, C6, S3) as DOM: the chat and the closed view draw them alike.
import { S } from "./strings.js";
import { h } from "./dom.js";

// `ended`: a turn ended (`stopped`) after the item: a reply left unfinished shows no cursor (C2)
export function itemNode(it, ended = false) {
  const growing = it.final === false && !ended;
  const cls = `item ${it.kind}${growing ? " cursor" : ""}`;
  switch (it.kind) {
    case "gap": return h("div", { class: "item gap", text: S.leftOut });
    case "user": return h("div", { class: cls, text: it.text || "" });
    case "markdown":
      if (typeof it.html === "string") { const el = h("div", { class: cls }); el.innerHTML = it.html; return el; }
      return h("div", { class: cls, text: it.text || "" });
    case "code": return h("div", { class: cls }, it.lang ? h("div", { class: "note", text: it.lang }) : null, h("pre", {}, h("code", { text: it.text || "" })));
    case "link": return h("div", { class: cls }, it.url && /^https:\/\//i.test(it.url)
      ? h("a", { href: it.url, rel: "noopener noreferrer nofollow", target: "_blank", text: it.label || it.url })
      : h("span", { text: it.label || it.url || "" }));
    case "tool": return h("div", { class: cls, "data-tool": it.tool_call_id || "" },
      h("div", {}, h("strong", { text: it.title || it.name || "tool" })),
      h("div", { class: "tstatus", text: S.toolStatus(it.status) }), it.output ? h("pre", { text: String(it.output) }) : null);
    case "ask": return it.line ? h("div", { class: "item line", text: it.line }) : null;
    case "turn_end": return it.stopped ? h("div", { class: "item notice", text: S.stopped }) : null;
    default: return h("div", { class: cls, text: it.text || "" });
  }
}
