// Collie's phone page: the entry module. Plain ES modules, no build step (docs/phone-app.md):
//   boot.js      runs first: the device key and the dashboard's request, before the rest arrives
//   api.js       the lead's API and live channel (every request the app makes) · device.js the phone's keys
//   state.js     the page's state, routing and the live channel's events
//   dashboard.js agent.js chat.js inbox.js newconv.js   one module per screen
//   askcard.js   the ask card · items.js one chat item · push.js Web Push · dom.js h() and friends
//   strings.js   every string the page shows
import { banner } from "./dom.js";
import { net, connectivity, phoneChanged, sleep, wake } from "./api.js";
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
const PUSH_CHECK_WAIT = 3000;
needsListeners.push((asked) => push().then((m) => m.closeAnsweredNotifications(asked)));

setInterval(() => { // Q3: countdowns move without a redraw of the whole page
  const shown = document.querySelectorAll("[data-expiry]");
  if (shown.length) import("./askcard.js").then(({ countdown }) => {
    for (const el of shown) el.textContent = countdown({ expires_at: el.dataset.expiry });
  });
}, 1000);
window.addEventListener("hashchange", navigate);
// The banner says which is out of reach: this phone's network, or the lead (api.js tells them apart)
net.listeners.push(() => banner(connectivity()));
// Issue 39: in the pocket the page is silent. Hidden (or left), it tells the lead it is off screen (issue 37:
// its turns are pushed) and closes its live channel; shown again, it opens a channel from the last event it
// had (on screen from the start) and draws what changed meanwhile. A push is what wakes the phone.
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "hidden") { pushView(); sleep(); } else wake();
});
window.addEventListener("pagehide", sleep);
window.addEventListener("pageshow", () => { if (document.visibilityState !== "hidden") wake(); });
if (document.visibilityState === "hidden") sleep();  // opened in the background: the channel waits to be seen
window.addEventListener("offline", phoneChanged);
window.addEventListener("online", phoneChanged);
// Whether the service worker could register: a browser that does not trust the lead's certificate refuses it,
// and the dashboard then says so where the notification switch would be (push.js)
app.push.sw = "serviceWorker" in navigator ? navigator.serviceWorker.register("/sw.js").then(() => true, () => false)
  : Promise.resolve(false);
const first = navigate();
first.then(connect);
// Whether this browser can have notifications is said even when the first reads fail or hang: the check waits
// for them (the push module stays off the first render's path) but at most PUSH_CHECK_WAIT
const settled = first.then(() => {}, () => {});
Promise.race([settled, new Promise((ok) => setTimeout(ok, PUSH_CHECK_WAIT))])
  .then(push).then((m) => m.checkPush()).then(() => { if (isRoute("dash")) rerender(); });

