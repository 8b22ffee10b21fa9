// Every string the phone shows that the product catalogue quotes, verbatim, in one place
// (features D, L, Q, O, R, C, N, W2, S3, I7, K3). Receipts carry their own sentence from the lead
// (crew/receipts.py); these are the ones the page draws by itself.
export const S = {
  experimental: "Experimental",                                   // D1, K3
  durableAgents: "Durable agents",                                // D1
  starting: "Starting", unreachable: "Unreachable", versionMismatch: "Version mismatch",  // D1, W2
  onlyNeedsYou: "Show only panes that need you",                 // D3
  needsYou: "Needs you",
  needsGone: "Asked by agents that are gone",                    // issue 36: not counted in Needs you
  untitled: "Untitled conversation",                              // L2
  closed: "Closed",                                               // L1
  loadMore: "Load more",                                          // L5
  listFailed: "Couldn't load the conversations. Try again.",      // L5 (the read failed on the way)
  reopen: "Reopen",                                               // L3
  needsAnswer: (agent) => `Needs your answer · ${agent}`,         // Q2
  expiresMin: (n) => `Expires in ${n} min`,                       // Q3
  expiresSec: (n) => `Expires in ${n} s`,                         // Q3
  expired: "Expired",                                             // Q3
  pickAny: "Pick any number",                                     // Q4
  counter: (n, max) => `${n} of ${max}`,                          // Q4
  send: "Send",                                                   // Q4, C3
  required: "Required",                                           // Q4
  textShortened: "Text shortened",                                // Q4, Q6
  toolStatus: (st) => ({ running: "running", completed: "done", failed: "failed", denied: "denied" }[st] || ""),  // S table: a tool call
  alwaysAllow: "Always allow",                                    // Q5
  tapAgain: "Tap again to always allow",                          // Q5
  cannotAnswer: "This ask cannot be answered from the phone.",   // Q7
  showMore: (n) => `Show ${n} more`,                              // Q8
  retry: "Retry",                                                 // O
  notCertain: "Not certain the answer arrived. Retry sends it once more.",  // O (the reply never reached the phone)
  openConversations: "Open conversations",
  sent: "Sent",                                                   // C3
  clock: "🕓",                                                    // C3: sending or sent, not yet the agent's copy
  queued: "queued",                                               // C9, B2
  notConfirmed: "Sending, not confirmed",                         // C3
  notSent: "Not sent",                                            // C3
  stopped: "stopped",                                             // C2
  steer: "Steer", stop: "Stop",                                   // C7
  closeConversation: "Close conversation",                        // C8
  leftOut: "Older messages were left out: the durable agent no longer keeps them.",  // S3
  newConversation: "New conversation",                            // N1
  noStarters: "This machine's durable agent offers no starters yet.",  // N3
  inbox: "Inbox",
  approve: "Approve", approved: "Approved", cancel: "Cancel", moveUp: "Move up", moveDown: "Move down",   // I3, I7, I9
  addMessage: "Add a message", messageToAdd: "Message to add", add: "Add",           // I7
  clearInbox: "Clear the inbox", inboxEmpty: "Nothing waits here.", inboxDone: "Running and finished",  // I9
  noAgents: "No durable agents are attached yet: see `collie durable attach`.",
  notOpen: "This conversation is not open.", back: "Back",
  offline: "This phone is offline: showing what was last loaded.",
  leadDown: "Can't reach the lead: showing what was last loaded.",
  lastLoaded: (t) => `Showing what was last loaded at ${t}.`,
  leadSilent: (n) => `The lead is not answering (${n} s): showing what was last loaded.`,  // issue 36: hung or asleep
  // issue 36: an answered card collapses to what the user chose (not a receipt line, R4)
  youDid: (verb, what) => what ? `${verb} · ${what}` : verb,
  didRole: { allow: "You allowed", always_allow: "You always allowed", deny: "You denied", cancel: "You cancelled",
    other: "You answered", chose: "You chose", answered: "You answered", sent: "You sent" },
  nothingPicked: "none",
  machineIsOffline: (m, t) => t ? `The machine is offline: ${m} since ${t}` : `The machine is offline: ${m}`,  // crew/receipts.py's words
  notLoaded: "This screen could not be read: the lead can't be reached, and this phone kept no copy of it.",
  notSentNoLead: "Not sent: the lead is out of reach.",
  nothingDoneNoLead: "Nothing was done: the lead is out of reach.",
  notSentOffline: "Not sent: this phone is offline.",
  notConfirmedNoLead: "Sending, not confirmed: the lead could not be reached. Send again to retry it once.",
  nothingDoneOffline: "Nothing was done: this phone is offline.",
  uncertainNoLead: "Not certain it was done: the lead could not be reached.",
  memberOffline: (m, t) => t ? `${m} is offline since ${t}: sends wait in the inbox; Steer, Stop and the agent's buttons come back when it is online.`
    : `${m} is offline: sends wait in the inbox; Steer, Stop and the agent's buttons come back when it is online.`,
  machineOffline: (t) => t ? `offline since ${t}` : "offline", machineOnline: "online",
  queuedOffline: (t) => `queued, machine offline since ${t}`,    // I7 (crew.md: the sender's words)
  // D1: an agent that does not answer, in the user's words (by the bridge's reason code)
  unreachableWhy: (agent, reason) => `${agent} is not answering: ${({
    "connection-refused": "its program is not running, or not listening where Collie looks",
    "no-socket": "its program is not running (its socket is not there)",
    "closed": "its program closed the connection",
    "timeout": "it stopped replying to Collie",
    "unauthorized": "it refused Collie's token",
    "socket-not-private": "its socket is open to other users, so Collie will not use it",
    "config": "its entry in Collie's settings is incomplete",
  })[reason] || "Collie cannot reach it right now"}. Sends wait in its inbox until it is back; an answer cannot reach it until then; collie doctor on its machine says more.`,
  // Q4: a permission option in Collie's words, by its role
  roles: { allow: "Allow", always_allow: "Always allow", deny: "Deny", cancel: "Cancel" },
  showEarlier: (n) => `Show ${n} earlier messages`,                 // #29: the chat draws its newest items
  showEarlierMore: "Show earlier messages",                           // #39: the lead holds older pages, read on a tap
  newItems: "New items",                                          // C1: the chat scrolled up, newer items came
  goToAsk: "Go to the question",                                  // B10: an ask blocks the send
  tapAgainClose: "Tap again to close",                            // C8: a destructive tap asks again
  tapAgainClear: "Tap again to clear the inbox",                  // I9
  cancelEdit: "Cancel",                                           // I7: leaves the message unsent, the request waits
  approvals: (n, agent) => `${n} ${n === 1 ? "request" : "requests"} waiting for your approval · ${agent}`,
  approvalsLabel: (n) => `${n} ${n === 1 ? "request" : "requests"} waiting for approval`,
  openLabel: (n) => `${n} open`, waitingLabel: (n) => `${n} waiting for you`, asksLabel: (n) => `${n} ${n === 1 ? "ask" : "asks"} waiting`,
  needsCount: (n) => `${n} waiting for you`,
  leftOutConvs: (n) => `${n} more ${n === 1 ? "conversation" : "conversations"} not shown`,  // L: the view left them out
  rename: "Rename", renameTo: "New title", save: "Save",          // C8: rename, when the agent declares it
  message: "Message", starter: "starter", from: "from",
  working: "working",
  notPaired: "This phone is not paired with Collie. On the lead, run `collie pair` and open the link it prints.",
  movedOn: "The conversation moved on, so the action did not run.",  // C7
  notifyOn: "Notify me when an agent asks",
  notifyTurns: "Notify me when a turn ends",                     // issue 37: this phone, every conversation
  notifyTurnsHere: "Notify me when a turn ends here",            // issue 37: this conversation (the chat's menu)
  notifyDone: "Notifications are on for this phone.",
  notifyDenied: "Notifications are blocked for this page: allow them in the browser's site settings.",
  notifyFailed: "Could not turn on notifications here.",
  // where the notification switch would be, when this page cannot have one (phone-api.md "A real phone")
  pushNoTrust: "No notifications or answers from the lock screen here: this browser does not trust the lead's certificate yet.",
  pushTrustLink: "Trust it once",
  pushHomeScreen: "On iPhone and iPad, notifications need Collie on the home screen: tap Share, then Add to Home Screen, and open Collie from there.",
  pushNone: "This browser gives web pages no notifications: open Collie in Chrome, Firefox, Edge or Safari to get them.",
};
