// Collie's phone page: the entry module. Plain ES modules, no build step (docs/phone-app.md):
//   boot.js      runs first: the device key and the dashboard's request, before the rest arrives
//   api.js       the lead's API and live channel (every request the app makes) · device.js the phone's keys
//   state.js     the page's state, routing and the live channel's events
//   dashboard.js agent.js chat.js inbox.js newconv.js   one module per screen
//   askcard.js   the ask card · items.js one chat item · push.js Web Push · dom.js h() and friends
//   strings.js   every string the page shows
import { banner } from "./dom.js";
import { net, connectivity, phoneChanged } from "./api.js";
import { app, register, navigate, connect, isRoute, rerender, needsListeners, pushView } from "./state.js";
import * as dashboard from "./dashboard.js";

register("dash", async () => dashboard);
register("agent", () => import("./agent.js"));
register("closedview", () => import("./agent.js").then((m) => m.closedView));
register("chat", () => import("./chat.js"));
register("new", () => import("./newconv.js"));
register("inbox", () => import("./inbox.js"));
// Web Push is off the first render's path: its module comes once the page is drawn
const push = () => import("./push.js");
needsListeners.push((asked) => push().then((m) => m.closeAnsweredNotifications(asked)));

setInterval(() => { // Q3: countdowns move without a redraw of the whole page
  const shown = document.querySelectorAll("[data-expiry]");
  if (shown.length) import("./askcard.js").then(({ countdown }) => {
    for (const el of shown) el.textContent = countdown({ expires_at: el.dataset.expiry });
  });
}, 1000);
window.addEventListener("hashchange", navigate);
document.addEventListener("visibilitychange", pushView);  // the lead hears whether the chat is on screen (issue 37)
// The banner says which is out of reach: this phone's network, or the lead (api.js tells them apart)
net.listeners.push(() => banner(connectivity()));
window.addEventListener("offline", phoneChanged);
window.addEventListener("online", phoneChanged);
// Whether the service worker could register: a browser that does not trust the lead's certificate refuses it,
// and the dashboard then says so where the notification switch would be (push.js)
app.push.sw = "serviceWorker" in navigator ? navigator.serviceWorker.register("/sw.js").then(() => true, () => false)
  : Promise.resolve(false);
navigate().then(connect).then(() => push()).then((m) => m.checkPush()).then(() => { if (isRoute("dash")) rerender(); });

