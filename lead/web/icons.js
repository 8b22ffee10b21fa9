// C7: the twelve icons an agent button may name, drawn by the page as SVG (never a font's glyph, which a
// phone may lack); any other name draws no icon. 24×24 strokes in the button's own colour.
const PATHS = {
  play: "M8 5v14l11-7z", pause: "M8 5v14M16 5v14", check: "M5 12l5 5L20 7", x: "M6 6l12 12M18 6L6 18",
  refresh: "M20 11a8 8 0 1 0-2.3 5.7M20 4v7h-7", archive: "M3 4h18v4H3zM5 8v12h14V8M10 12h4",
  flag: "M5 21V4M5 4h12l-2 4 2 4H5", star: "M12 3l2.8 5.8 6.2.9-4.5 4.4 1 6.2L12 17.4 6.5 20.3l1-6.2L3 9.7l6.2-.9z",
  send: "M3 11l18-8-8 18-2-8z", note: "M4 20h4L19 9l-4-4L4 16zM14 6l4 4", search: "M10.5 17a6.5 6.5 0 1 1 0-13 6.5 6.5 0 0 1 0 13zM15.5 15.5L21 21",
  more: "M5 12h.01M12 12h.01M19 12h.01",
};
const NS = "http://www.w3.org/2000/svg";
export function icon(name) {
  if (!Object.hasOwn(PATHS, name)) return null;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24"); svg.setAttribute("aria-hidden", "true"); svg.setAttribute("class", "icon");
  svg.setAttribute("data-icon", name);
  const path = document.createElementNS(NS, "path");
  path.setAttribute("d", PATHS[name]);
  svg.append(path);
  return svg;
}
