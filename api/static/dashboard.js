// Tepat's operator dashboard: polls /dashboard/data and redraws. No build step, no library.
// Every value goes in with textContent, never as HTML: reasons and ids come from outside.
"use strict";

const POLL_MS = 2000;
const HISTORY = 60; // samples kept per channel for the charts: two minutes at one per poll
const SVG = "http://www.w3.org/2000/svg";
const csrf = document.querySelector('meta[name="csrf-token"]').content;
let timer = null;
// Per channel: the previous poll's totals, and the rates computed since, oldest first.
// Rates come from two polls of the store's totals over the service's own clock, so a
// figure repeated from the server's cache (no time passed) adds no point.
const history = new Map();

function $(id) {
  return document.getElementById(id);
}

function text(id, value) {
  $(id).textContent = value;
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${value.toFixed(1)} s`;
  return `${(value / 60).toFixed(1)} min`;
}

function span(value) {
  return value >= 120 ? `${Math.round(value / 60)} min` : `${Math.round(value)} s`;
}

function count(value) {
  return value === null || value === undefined ? "?" : String(value);
}

function row(cells, attrs = {}) {
  const tr = document.createElement("tr");
  for (const [name, value] of Object.entries(attrs)) tr.dataset[name] = value;
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.append(cell);
    else {
      td.textContent = cell.text;
      if (cell.cls) td.className = cell.cls;
    }
    tr.append(td);
  }
  return tr;
}

function fill(tableId, rows, empty) {
  const body = $(tableId).querySelector("tbody");
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = $(tableId).querySelectorAll("thead th").length;
    td.className = "empty";
    td.textContent = empty;
    tr.append(td);
    rows = [tr];
  }
  body.replaceChildren(...rows);
}

function sent(statuses) {
  return (statuses.sent || 0) + (statuses.delivered || 0);
}

// Sends/s and 429s/s since the previous poll; null on the first poll or when no time passed.
function track(channel, at) {
  const sample = { at, sent: sent(channel.messages_by_status), throttled: channel.throttled };
  let h = history.get(channel.channel);
  if (!h) {
    h = { last: sample, sends: [], throttled: [] };
    history.set(channel.channel, h);
    return h;
  }
  const dt = (at - h.last.at) / 1000;
  if (dt > 0) {
    h.sends.push(Math.max(0, sample.sent - h.last.sent) / dt);
    h.throttled.push(Math.max(0, sample.throttled - h.last.throttled) / dt);
    for (const list of [h.sends, h.throttled]) if (list.length > HISTORY) list.shift();
    h.last = sample;
  }
  return h;
}

function rate(list) {
  return list.length ? list[list.length - 1].toFixed(2) : "–";
}

// A chart of each series' rates (a line per series, scaled to the highest value shown),
// drawn as SVG elements: no inline style, which the CSP forbids.
function sparkline(series, label) {
  const width = 120;
  const height = 24;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const top = Math.max(0, ...Object.values(series).flat()) || 1;
  const step = width / (HISTORY - 1);
  for (const [name, values] of Object.entries(series)) {
    svg.dataset[name] = values.length ? String(Math.max(...values)) : "0";
    const start = width - (values.length - 1) * step;
    const points = values.map((v, i) => {
      const y = height - 1 - (v / top) * (height - 2);
      return `${(start + i * step).toFixed(1)},${y.toFixed(1)}`;
    });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("class", name);
    svg.append(line);
  }
  return svg;
}

// The provider, and any of its circuit breakers (this process's) that is not closed.
function breakerCell(c) {
  const tripped = Object.entries(c.breakers).filter(([, state]) => state !== "closed");
  if (!tripped.length) return { text: c.provider };
  const states = tripped.map(([provider, state]) => `${provider} ${state.replace("_", "-")}`);
  return { text: `${c.provider} (breaker: ${states.join(", ")})`, cls: "bad" };
}

function render(d) {
  const r = d.rates;
  text("sends-per-second", r.sends_per_second.toFixed(r.sends_per_second < 10 ? 2 : 0));
  text("sends-window", `over the last ${span(r.sends_window_seconds)}`);
  text("lateness-p50", seconds(r.lateness_p50_seconds));
  text("lateness-p99", seconds(r.lateness_p99_seconds));
  text("lateness-window", `over the last ${span(r.lateness_window_seconds)}`);
  const n = r.lateness_samples;
  text("lateness-samples", `${n} notification${n === 1 ? "" : "s"} sent`);
  text("devices-deactivated", String(d.devices_deactivated_total));
  const reasons = Object.entries(d.devices_deactivated).map(([k, v]) => `${k || "?"} ${v}`);
  text("devices-reasons", reasons.length ? reasons.join(" · ") : "since 00:00 UTC");
  text("tzdata", d.tzdata_release);
  // A probe write per refresh: "unavailable" while the store is locked, down or too slow.
  text("store-status", d.store.up ? "up" : "unavailable");
  $("store-status").classList.toggle("bad", !d.store.up);
  text("store-detail", d.store.up ? `a write took ${seconds(d.store.probe_seconds)}` : d.store.error);
  text("live-consumers", String(d.live_consumers));
  text("oldest-due", d.oldest_due_unsent_seconds === null ? "none" : seconds(d.oldest_due_unsent_seconds));
  $("oldest-due").classList.toggle("bad", (d.oldest_due_unsent_seconds || 0) >= 60);
  text("failures-window", `(last ${span(d.failures_window_seconds)})`);

  const at = new Date(d.generated_at);
  fill(
    "channels",
    d.channels.map((c) => {
      const h = track(c, at.getTime());
      const answers = Object.entries(c.answers_by_outcome).map(([k, v]) => `${k} ${v}`);
      const failovers = Object.entries(c.failovers).map(([route, n]) => `${route} ${n}`);
      const m = c.messages_by_status;
      return row(
        [
          { text: c.channel },
          breakerCell(c),
          { text: String(m.pending || 0), cls: "n pending" },
          { text: String(m.sending || 0), cls: "n sending" },
          { text: String(sent(m)), cls: "n sent" },
          { text: String(m.failed || 0), cls: m.failed ? "n failed bad" : "n failed" },
          { text: rate(h.sends), cls: "n sends-rate" },
          sparkline(
            { sends: h.sends, throttled: h.throttled },
            `${c.channel}: sends and 429s per second, last ${HISTORY} refreshes`,
          ),
          { text: answers.length ? answers.join(" · ") : "none", cls: "answers" },
          { text: String(c.throttled), cls: c.throttled ? "n throttled bad" : "n throttled" },
          { text: rate(h.throttled), cls: "n throttled-rate" },
          { text: String(c.retries), cls: "n retries" },
          { text: failovers.length ? failovers.join(" · ") : "none", cls: "failovers" },
        ],
        { channel: c.channel },
      );
    }),
    "no channels",
  );

  fill(
    "push-providers",
    d.push_providers.map((p) => {
      const s = p.sends_by_outcome;
      return row(
        [
          { text: p.provider },
          { text: String(s.accepted || 0), cls: "n accepted" },
          { text: String(p.throttled), cls: p.throttled ? "n throttled bad" : "n throttled" },
          { text: String(s.try_again || 0), cls: "n try-again" },
          { text: String(s.refused || 0), cls: s.refused ? "n refused bad" : "n refused" },
          { text: String(s.not_sent || 0), cls: "n not-sent" },
        ],
        { provider: p.provider },
      );
    }),
    "no push providers",
  );

  fill(
    "apps",
    d.apps.map((a) =>
      row(
        [
          { text: a.app },
          { text: String(a.sent), cls: "n sent" },
          { text: String(a.answers), cls: "n answers" },
          { text: String(a.throttled), cls: a.throttled ? "n throttled bad" : "n throttled" },
          { text: String(a.reserve_used), cls: "n reserve" },
          { text: seconds(a.lateness_p50_seconds), cls: "n p50" },
          { text: seconds(a.lateness_p99_seconds), cls: "n p99" },
        ],
        { app: a.app },
      ),
    ),
    "no apps",
  );

  fill(
    "queues",
    d.queues.map((q) =>
      row(
        [
          { text: q.channel },
          { text: q.category || "–" },
          { text: q.queue, cls: "mono" },
          { text: count(q.ready), cls: "n ready" },
          { text: count(q.scheduled), cls: "n scheduled" },
          { text: count(q.in_flight), cls: "n in-flight" },
          { text: count(q.dead_letters), cls: q.dead_letters ? "n dead bad" : "n dead" },
        ],
        q.category ? { queue: q.queue, category: q.category } : { queue: q.queue },
      ),
    ),
    "no queues",
  );

  fill(
    "failures",
    Object.entries(d.failures_by_code).map(([code, n]) =>
      row([{ text: code, cls: "mono" }, { text: String(n), cls: "n" }], { code }),
    ),
    "none",
  );

  fill(
    "dead-letters",
    d.dead_letters.map((dl) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "replay";
      button.textContent = "Replay";
      button.addEventListener("click", () => replay(dl.id, button));
      return row(
        [
          { text: dl.queue, cls: "mono" },
          { text: dl.reason, cls: "reason" },
          { text: String(dl.attempts), cls: "n attempts" },
          { text: dl.messages === null ? "unreadable" : String(dl.messages), cls: "n" },
          button,
        ],
        { id: dl.id },
      );
    }),
    "none",
  );

  const problems = $("problems");
  problems.hidden = d.problems.length === 0;
  problems.textContent = d.problems.join("; ");
  text("status", `updated ${at.toISOString().slice(11, 19)} UTC`);
  $("status").classList.remove("stale");
}

async function refresh() {
  clearTimeout(timer);
  try {
    const response = await fetch("/dashboard/data", { credentials: "same-origin" });
    if (response.status === 401) {
      window.location.assign("/dashboard/login");
      return;
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
  } catch (error) {
    text("status", `not updated: ${error.message}`);
    $("status").classList.add("stale");
  }
  timer = setTimeout(refresh, POLL_MS);
}

async function replay(id, button) {
  button.disabled = true;
  button.textContent = "Replaying…";
  try {
    const response = await fetch(`/dashboard/dead-letters/${encodeURIComponent(id)}/replay`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf },
    });
    if (!response.ok) {
      const problem = await response.json().catch(() => ({}));
      throw new Error(problem.detail || `HTTP ${response.status}`);
    }
  } catch (error) {
    button.disabled = false;
    button.textContent = "Replay";
    text("status", `replay failed: ${error.message}`);
    $("status").classList.add("stale");
    return;
  }
  await refresh();
}

async function find(event) {
  event.preventDefault();
  const by = $("find-by").value;
  const value = $("find-value").value.trim();
  text("find-status", "searching…");
  try {
    const params = new URLSearchParams({ [by]: value });
    const response = await fetch(`/dashboard/messages?${params}`, { credentials: "same-origin" });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
    const n = body.messages.length;
    text("find-status", by === "user" && n === body.limit ? `the newest ${n}` : `${n} found`);
    fill(
      "found",
      body.messages.map((m) =>
        row(
          [
            { text: m.id, cls: "mono" },
            { text: m.user_id, cls: "mono" },
            { text: m.channel },
            { text: m.category },
            { text: m.status, cls: "status" },
            { text: m.status_reason || "", cls: "reason" },
            { text: m.scheduled_at.slice(0, 19).replace("T", " ") },
            { text: String(m.attempts), cls: "n" },
          ],
          { id: m.id },
        ),
      ),
      "no such message",
    );
  } catch (error) {
    text("find-status", `not found: ${error.message}`);
  }
}

$("find").addEventListener("submit", find);
refresh();
