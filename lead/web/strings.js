// Every string the phone shows that the product catalogue quotes, verbatim, in one place
// (features D, L, Q, O, R, C, N, W2, S3, I7, K3). Receipts carry their own sentence from the lead
// (crew/receipts.py); these are the ones the page draws by itself.
export const S = {
  experimental: "Experimental",                                   // D1, K3
  durableAgents: "Durable agents",                                // D1
  starting: "Starting", unreachable: "Unreachable", versionMismatch: "Version mismatch",  // D1, W2
  onlyNeedsYou: "Show only panes that need you",                 // D3
  needsYou: "Needs you",
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
  approve: "Approve", cancel: "Cancel", moveUp: "Move up", moveDown: "Move down",   // I3, I7, I9
  addMessage: "Add a message", messageToAdd: "Message to add", add: "Add",           // I7
  clearInbox: "Clear the inbox", inboxEmpty: "Nothing waits here.", inboxDone: "Running and finished",  // I9
  offlineSince: (t) => `machine offline since ${t}`,              // I7
  noAgents: "No durable agents are attached yet: see `collie durable attach`.",
  notOpen: "This conversation is not open.", back: "Back",
  offline: "Offline: showing what was last loaded.",
  notPaired: "This phone is not paired with Collie. On the lead, run `collie pair` and open the link it prints.",
  movedOn: "The conversation moved on, so the action did not run.",  // C7
  notifyOn: "Notify me when an agent asks",
  notifyDone: "Notifications are on for this phone.",
  notifyDenied: "Notifications are blocked for this page: allow them in the browser's site settings.",
  notifyFailed: "Could not turn on notifications here.",
};
// C7: the twelve icons an agent button may name; any other name draws no icon
export const ICONS = {play: "▶", pause: "⏸", check: "✓", x: "✕", refresh: "↻", archive: "🗄", flag: "⚑",
  star: "★", send: "➤", note: "✎", search: "⌕", more: "⋯"};
