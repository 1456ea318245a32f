// baton's dashboard: the overview of every key, live over server-sent events
// (GET /v1/overview/watch), a key's page with its history (GET /v1/keys/KEY/log), and, with an
// admin token, cancel and force-release (POST /v1/keys/KEY/ops, a `cancel` operation).
//
// Everything shown comes from the API as any client sees it; text is set with textContent only.
// Durations count between events on this page's own clock, from the value the server sent.
"use strict";

const QUEUE_ROWS = 5; // queue rows reserved per card, so a moving queue does not shift the page
const state = {
  keys: new Map(), // key -> { status, at: performance.now() when received }
  values: [],
  token: sessionStorage.getItem("baton-token") || "",
  whoami: null,
  connection: null,
  route: { page: "overview", key: null },
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h.Authorization = "Bearer " + state.token;
  return h;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return ms + "ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m" + String(s % 60).padStart(2, "0") + "s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + "h" + String(m % 60).padStart(2, "0") + "m";
  return Math.floor(h / 24) + "d" + String(h % 24).padStart(2, "0") + "h";
}

function ago(iso) {
  if (!iso) return "";
  return duration(Date.now() - Date.parse(iso)) + " ago";
}

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

function setLive(on, text) {
  const live = $("live");
  live.classList.toggle("on", on === true);
  live.classList.toggle("off", on === false);
  $("live-text").textContent = text;
}

// ----- the live overview ------------------------------------------------------------------

// Reads server-sent events from a fetch (EventSource cannot send the Authorization header).
async function follow() {
  const prefix = "";
  const controller = new AbortController();
  state.connection = controller;
  let response;
  try {
    response = await fetch("/v1/overview/watch?prefix=" + encodeURIComponent(prefix), {
      headers: headers(), signal: controller.signal, cache: "no-store",
    });
  } catch (e) {
    return retry("cannot reach the server");
  }
  if (response.status === 401) {
    state.connection = null;
    setLive(false, "needs a token");
    openToken("This server needs a token to show its keys.");
    return;
  }
  if (!response.ok) return retry("the server answered " + response.status);
  state.keys.clear();
  render();
  setLive(true, "live");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      break;
    }
    if (chunk.done) break;
    buffer += decoder.decode(chunk.value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) handle(event, JSON.parse(data.join("\n")));
    }
  }
  retry("reconnecting");
}

function retry(why) {
  state.connection = null;
  setLive(false, why);
  setTimeout(() => { if (!state.connection) follow(); }, 1000);
}

function handle(event, data) {
  if (event === "key") {
    state.keys.set(data.key, { status: data, at: performance.now() });
    renderKey(data.key);
  } else if (event === "gone") {
    state.keys.delete(data.key);
    renderKey(data.key);
  } else if (event === "values") {
    state.values = data.values;
    renderValues();
  } else if (event === "closing") {
    setLive(false, "server stopping");
  }
}

// ----- rendering --------------------------------------------------------------------------

function visibleKeys() {
  const filter = $("filter").value.trim();
  return [...state.keys.keys()].filter((k) => k.startsWith(filter)).sort();
}

function render() {
  const container = $("keys");
  const keys = visibleKeys();
  const cards = keys.map((key) => card(key));
  container.replaceChildren(...cards);
  $("empty").hidden = keys.length > 0 || !state.whoami;
  renderValues();
  renderKeyPage();
}

function renderKey(key) {
  if (state.route.page === "key") {
    if (key === state.route.key) renderKeyPage();
    return;
  }
  const container = $("keys");
  const existing = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
  const entry = state.keys.get(key);
  const visible = entry && key.startsWith($("filter").value.trim());
  if (existing && visible) {
    replaceCard(existing, card(key));
  } else {
    render();
  }
}

function renderValues() {
  const filter = $("filter").value.trim();
  const names = state.values.filter((n) => n.startsWith(filter));
  $("values-section").hidden = names.length === 0 || state.route.page !== "overview";
  $("values").replaceChildren(...names.map((n) => el("li", { text: n })));
}

// A duration that counts on this page's clock: up from `ms` (held, waited) or down (`-1`: a
// lease left, an estimate), from the moment the event carrying it arrived.
function counting(ms, direction, at, suffix, attrs) {
  if (ms === null || ms === undefined) return el("span", Object.assign({ class: "t" }, attrs || {}));
  const node = el("span", Object.assign({ class: "t", "data-ms": ms, "data-dir": direction, "data-at": at, "data-suffix": suffix || "" }, attrs || {}));
  tickOne(node);
  return node;
}

function tickOne(node) {
  const elapsed = performance.now() - Number(node.getAttribute("data-at"));
  const value = Number(node.getAttribute("data-ms")) + Number(node.getAttribute("data-dir")) * elapsed;
  const suffix = node.getAttribute("data-suffix");
  node.textContent = (suffix === "~" ? "~" : "") + duration(Math.max(0, value)) + (suffix && suffix !== "~" ? suffix : "");
}

// Replaces a card, keeping the keyboard's focus on the same button of the new one.
function replaceCard(old, fresh) {
  const focused = old.contains(document.activeElement) ? document.activeElement : null;
  const ticket = focused && focused.closest("[data-ticket]");
  old.replaceWith(fresh);
  if (ticket) {
    const again = fresh.querySelector(`[data-ticket="${CSS.escape(ticket.getAttribute("data-ticket"))}"] button`);
    if (again) again.focus();
  }
}

function card(key, large) {
  const entry = state.keys.get(key);
  const s = entry.status;
  const at = entry.at;
  const holders = s.holders || [];
  const queue = s.queue || [];
  const badge = s.paused
    ? el("span", { class: "badge paused", text: "paused", title: "baton pause " + s.paused.target })
    : holders.length === 0
    ? el("span", { class: "badge free", text: "free" })
    : queue.length + s.backlog > 0
      ? el("span", { class: "badge wait", text: (queue.length + s.backlog) + " waiting" })
      : el("span", { class: "badge held", text: "held" });
  const head = el("div", { class: "card-head" },
    el("a", { href: "#/key/" + encodeURIComponent(key), text: key, title: key }),
    badge,
    el("span", { class: "meta t", text: (s.slots ? "pool of " + s.slots.length + " · " : s.limit > 1 ? "limit " + s.limit + " · " : "") + "fence " + s.fence }));

  const action = (label, name, act) => el("span", { class: "act" }, s.admin ? el("button", {
    type: "button", class: "small", text: label, "aria-label": name, onclick: act,
  }) : null);
  const holderRows = holders.map((t) => el("li", { "data-ticket": t.id },
    el("span", { class: "pos", text: "▶", title: "holds the key" }),
    el("span", { class: "who", text: t.context || t.id, title: t.id + (t.job ? " (a job)" : "") }),
    el("span", { class: "times" },
      t.slots ? el("span", { class: "slot-tag", text: (t.slots.length > 1 ? "slots " : "slot ") + t.slots.join(","), title: "holds " + t.slots.join(", ") }) : null,
      t.slots ? " · " : null,
      t.stop_asked ? el("span", { class: "stopping", text: "stopping · ", title: "asked to stop by " + t.stop_asked + " (--cancel-running)" }) : null,
      "held ", counting(t.held_ms, 1, at, "", { title: "since " + t.acquired_at }),
      t.lease_left_ms === null ? null : " · lease ",
      t.lease_left_ms === null ? null : counting(t.lease_left_ms, -1, at, " left", { title: "on the store's clock" }),
      " · fence ", el("span", { class: "t", text: String(t.fence) }),),
    action("Force release", "Force-release " + key + " held by " + (t.context || t.id), () => cancel(key, t, true))));
  // Room for as many holders as the key allows (up to three), so a grant does not move the page.
  if (holderRows.length === 0) holderRows.push(el("li", { class: "none" }, el("span", { class: "who", text: "free: nobody holds it" })));
  while (holderRows.length < Math.min(Math.max(s.limit, 1), 3)) {
    holderRows.push(el("li", { class: "blank", "aria-hidden": "true", text: "·" }));
  }
  const shown = queue.slice(0, large ? queue.length : QUEUE_ROWS);
  const queueRows = shown.map((t) => el("li", { "data-ticket": t.id },
    el("span", { class: "pos t", text: "#" + t.position }),
    el("span", { class: "who", text: t.context || t.id, title: t.id + (t.job ? " (a job)" : "") }),
    el("span", { class: "times" },
      t.wants_slot ? el("span", { class: "slot-tag", text: "for slot " + t.wants_slot, title: "waits for this slot only (--slot)" }) : null,
      t.wants_slot ? " · " : null,
      "waiting ", counting(t.waiting_ms, 1, at, "", { title: "since " + t.enqueued_at }),
      t.wait_estimate_ms === null || t.wait_estimate_ms === undefined ? null : " · turn in ",
      counting(t.wait_estimate_ms, -1, at, "~", { title: "estimated from recent hold times" })),
    action("Cancel", "Cancel " + (t.context || t.id) + " waiting for " + key, () => cancel(key, t, false))));
  if (queueRows.length === 0) queueRows.push(el("li", { class: "none" }, el("span", { class: "who", text: "nobody waits" })));
  if (!large) {
    while (queueRows.length < QUEUE_ROWS) queueRows.push(el("li", { class: "blank", "aria-hidden": "true", text: "·" }));
  }
  const hidden = queue.length - shown.length + (s.backlog || 0);
  const foot = el("div", { class: "foot" },
    s.last_outcome ? el("span", {},
      "last: ", el("span", { class: "outcome-" + s.last_outcome, text: s.last_outcome }),
      " " + ago(s.last_finished_at)) : el("span", { text: "no turn ended yet" }),
    s.mean_hold_ms ? el("span", { class: "t", text: "mean hold " + duration(s.mean_hold_ms) }) : null,
    (s.jobs && (s.jobs.queued || s.jobs.running)) ? el("span", { text: "jobs: " + s.jobs.running + " running, " + s.jobs.queued + " queued" }) : null,
    s.consecutive_failures > 1 ? el("span", { class: "outcome-failed", text: s.consecutive_failures + " failures in a row" }) : null);
  // A freeze: no new grant until it ends (holders finish; the queue keeps its places).
  const paused = s.paused ? el("p", { class: "paused-line", role: "status" },
    el("span", { class: "paused-word", text: "Paused" }),
    " by " + s.paused.by + ": " + s.paused.reason + " · " +
      (s.paused.until ? "until " + s.paused.until : "until resumed")) : null;
  return el("article", { class: "card", "data-key": key, "aria-label": key },
    head,
    paused,
    s.slots ? poolStrip(s.slots, holders) : null,
    el("p", { class: "section-label" }, el("span", { text: "Holding" })),
    el("ul", { class: "rows holders" }, ...holderRows),
    el("p", { class: "section-label" }, el("span", { text: "Queue" }), el("span", { class: "t", text: queue.length + (s.backlog || 0) ? String(queue.length + (s.backlog || 0)) : "" })),
    el("ul", { class: "rows queue" }, ...queueRows),
    el("p", { class: "more", text: hidden > 0 ? "and " + hidden + " more" : "" }),
    foot);
}

// A pool's slots in the order they are given out, each held (by whom) or free.
function poolStrip(slots, holders) {
  const chips = slots.map(({ slot, holder }) => {
    const by = holders.find((t) => t.id === holder);
    const who = by ? by.context || by.id : null;
    return el("li", { class: "slot " + (holder ? "held" : "free"), "data-slot": slot, title: who ? slot + ": held by " + who : slot + ": free" },
      el("span", { class: "slot-name", text: slot }),
      el("span", { class: "slot-state", text: holder ? "held" : "free" }));
  });
  return el("ul", { class: "slots", "aria-label": "slots" }, ...chips);
}

// Counts the durations on, every second, in place.
setInterval(() => {
  for (const node of document.querySelectorAll("[data-ms]")) tickOne(node);
}, 1000);

// ----- a key's page -----------------------------------------------------------------------

function renderKeyPage() {
  if (state.route.page !== "key") return;
  const key = state.route.key;
  $("key-title").textContent = key;
  const old = $("key-card").firstElementChild;
  const fresh = state.keys.has(key)
    ? card(key, true)
    : el("p", { class: "empty", text: "This key has no live document (yet)." });
  if (old) replaceCard(old, fresh);
  else $("key-card").append(fresh);
  loadHistory(key);
}

async function loadHistory(key) {
  const seq = (loadHistory.seq = (loadHistory.seq || 0) + 1);
  let response;
  try {
    response = await fetch("/v1/keys/" + encodeURIComponent(key) + "/log?n=50", { headers: headers() });
  } catch (e) {
    return;
  }
  if (!response.ok || seq !== loadHistory.seq) return;
  const body = await response.json();
  const rows = (body.entries || []).filter((e) => !e.error).map((e) => {
    const granted = e.granted_wall_ms;
    const waited = (granted || e.finished_wall_ms) - e.enqueued_wall_ms;
    const when = new Date(e.finished_wall_ms);
    return el("tr", {},
      el("td", { class: "t", text: when.toLocaleString(), title: when.toISOString() }),
      el("td", { class: "outcome-" + e.outcome, text: e.outcome + (e.forced ? " (forced)" : "") }),
      el("td", { text: e.id }),
      el("td", { class: "num t", text: e.fence || "" }),
      el("td", { class: "num t", text: duration(waited) }),
      el("td", { class: "num t", text: granted ? duration(e.finished_wall_ms - granted) : "" }),
      el("td", { class: "ctx", text: e.context || "" }),
      el("td", { class: "ctx", text: e.reason || "" }));
  });
  $("history").tBodies[0].replaceChildren(...rows);
  $("history-empty").hidden = rows.length > 0;
}

// ----- acting -----------------------------------------------------------------------------

function confirmDialog(title, text, ok) {
  return new Promise((resolve) => {
    const dialog = $("confirm");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = text;
    $("confirm-ok").textContent = ok;
    dialog.returnValue = "";
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
    dialog.showModal();
  });
}

async function cancel(key, ticket, held) {
  const who = ticket.context || ticket.id;
  const confirmed = await confirmDialog(
    held ? "Force-release " + key + "?" : "Cancel this waiter?",
    held
      ? who + " holds " + key + ". Force-releasing it lets the next one in while it may still run: the history records it as forced."
      : who + " waits for " + key + " at #" + ticket.position + ". It is taken out of the queue and told it was cancelled.",
    held ? "Force release" : "Cancel it");
  if (!confirmed) return;
  const by = "the dashboard" + (state.whoami && state.whoami.name ? " (" + state.whoami.name + ")" : "");
  const attempt = [...crypto.getRandomValues(new Uint8Array(8))].map((b) => b.toString(16).padStart(2, "0")).join("");
  const body = { attempt, op: { op: "cancel", id: ticket.id, by } };
  let response;
  try {
    response = await fetch("/v1/keys/" + encodeURIComponent(key) + "/ops", {
      method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
    });
  } catch (e) {
    return toast("Could not reach the server: nothing was done.");
  }
  if (response.ok) {
    toast(held ? "Force-released " + key + "." : "Cancelled " + who + ".");
  } else {
    const error = await response.json().catch(() => ({}));
    toast((error.error && error.error.message) || "The server answered " + response.status + ".");
  }
}

// ----- the token --------------------------------------------------------------------------

async function whoami() {
  try {
    const response = await fetch("/v1/whoami", { headers: headers() });
    state.whoami = response.ok ? await response.json() : null;
  } catch (e) {
    state.whoami = null;
  }
  $("whoami").textContent = state.whoami
    ? "Using: " + state.whoami.name + " (" + state.whoami.scopes.join(", ") + ")"
    : state.token ? "The server does not accept this token." : "No token set.";
}

function openToken(reason) {
  $("token-input").value = state.token;
  if (reason) $("whoami").textContent = reason;
  $("token-dialog").showModal();
}

$("token-button").addEventListener("click", () => openToken());
$("token-dialog").addEventListener("close", async () => {
  if ($("token-dialog").returnValue !== "save") return;
  state.token = $("token-input").value.trim();
  sessionStorage.setItem("baton-token", state.token);
  await whoami();
  await about();
  if (state.connection) state.connection.abort();
  else follow();
});

// ----- routes and keys --------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/key\/(.+)$/);
  state.route = match ? { page: "key", key: decodeURIComponent(match[1]) } : { page: "overview", key: null };
  $("overview").hidden = state.route.page !== "overview";
  $("key-page").hidden = state.route.page !== "key";
  document.title = state.route.key ? state.route.key + " · baton" : "baton";
  render();
}

window.addEventListener("hashchange", route);
$("filter").addEventListener("input", render);
document.addEventListener("keydown", (event) => {
  const typing = ["INPUT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (event.key === "/" && !typing) {
    event.preventDefault();
    if (state.route.page !== "overview") location.hash = "#/";
    $("filter").focus();
  } else if (event.key === "Escape" && state.route.page === "key" && !document.querySelector("dialog[open]")) {
    location.hash = "#/";
  }
});

async function about() {
  try {
    const response = await fetch("/v1/store", { headers: headers() });
    if (response.ok) $("store").textContent = (await response.json()).store;
  } catch (e) { /* shown by the live indicator */ }
}

(async function start() {
  await whoami();
  if (state.whoami) await about();
  route();
  follow();
})();
