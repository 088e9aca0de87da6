// Tepat's operator dashboard: polls /dashboard/data and redraws. No build step, no library.
// Every value goes in with textContent, never as HTML: reasons and ids come from outside.
"use strict";

const POLL_MS = 2000;
const csrf = document.querySelector('meta[name="csrf-token"]').content;
let timer = null;

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
  text("failures-window", `(last ${span(d.failures_window_seconds)})`);

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
  const at = new Date(d.generated_at);
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

refresh();
