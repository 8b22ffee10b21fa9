// Collie's phone page: the entry module. Plain ES modules, no build step (docs/phone-app.md):
//   api.js       the lead's API and live channel (the only module that calls fetch)
//   state.js     the page's state, routing and the live channel's events
//   dashboard.js agent.js chat.js inbox.js newconv.js   one module per screen
//   askcard.js   the ask card · items.js one chat item · push.js Web Push · dom.js h() and friends
//   strings.js   every string the page shows
import { S } from "./strings.js";
import { banner } from "./dom.js";
import { register, navigate, connect, isRoute, rerender, needsListeners } from "./state.js";
import * as dashboard from "./dashboard.js";
import * as agent from "./agent.js";
import * as chat from "./chat.js";
import * as inbox from "./inbox.js";
import * as newconv from "./newconv.js";
import { countdown } from "./askcard.js";
import { checkPush, closeAnsweredNotifications } from "./push.js";

register("dash", dashboard);
register("agent", agent);
register("closedview", agent.closedView);
register("chat", chat);
register("new", newconv);
register("inbox", inbox);
needsListeners.push(closeAnsweredNotifications);

setInterval(() => { // Q3: countdowns move without a redraw of the whole page
  for (const el of document.querySelectorAll("[data-expiry]")) el.textContent = countdown({ expires_at: el.dataset.expiry });
}, 1000);
window.addEventListener("hashchange", navigate);
window.addEventListener("offline", () => banner(S.offline));
window.addEventListener("online", () => banner(""));
if ("serviceWorker" in navigator) navigator.serviceWorker.register("/sw.js").catch(() => {});
navigate().then(connect).then(checkPush).then(() => { if (isRoute("dash")) rerender(); });

