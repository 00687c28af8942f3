// The XCE dashboard: plain DOM, no build step. Every value from the cluster is set as text
// (textContent), never parsed as HTML: a job named <img src=x onerror=...> is shown, not run.
// The API key is posted once to /ui/session, which keeps it in an HttpOnly, SameSite=Strict cookie;
// this script never sees it again and it never appears in a URL. A write (a job's action) carries
// the session's CSRF token in a header, which only this origin's page can read (GET /ui/session).
// Counts come from GET /xce/v1/stats, counted by the gateway; job lists are read a page at a time.
"use strict";

const API = "/xce/v1";
const PAGE_SIZE = 50;
const ACTIONS = { kill: "Kill", hold: "Hold", release: "Release", requeue: "Requeue" };
const state = {
  jobs: new Map(), events: null, page: "", refreshTimer: 0, statsTimer: 0, csrf: "",
  pages: [""], at: 0, next: "", stats: null,
};
const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
const when = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

async function problem(answer) {
  let detail = answer.statusText || `HTTP ${answer.status}`;
  try { detail = (await answer.json()).detail || detail; } catch (e) { /* not JSON */ }
  return new Error(detail);
}

async function api(path, init) {
  const answer = await fetch(API + path, { credentials: "same-origin", ...(init || {}) });
  if (answer.status === 401) { showSignIn(); throw new Error("signed out"); }
  if (!answer.ok) throw await problem(answer);
  const kind = answer.headers.get("content-type") || "";
  return kind.startsWith("application/json") ? answer.json() : answer.text();
}

function write(path, body) {
  return api(path, { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-XCE-CSRF": state.csrf } });
}

function showError(error) { $("error").textContent = error ? String(error.message || error) : ""; }

// ------------------------------------------------------------------ times

function ms(value) { return Number(value || 0); }
function time(value) { return ms(value) ? when.format(new Date(ms(value))) : "-"; }
function duration(millis) {
  if (!(millis >= 0)) return "-";
  const s = Math.round(millis / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
function waited(j) {
  if (!ms(j.submit_time_ms)) return "-";
  if (ms(j.start_time_ms)) return duration(ms(j.start_time_ms) - ms(j.submit_time_ms));
  if (j.state === "PEND" || j.state === "PSUSP") return duration(Date.now() - ms(j.submit_time_ms));
  return "-";
}

// ------------------------------------------------------------------ session

function showSignIn() {
  for (const page of document.querySelectorAll(".page")) page.hidden = true;
  $("nav").hidden = true;
  $("signin").hidden = false;
  if (state.events) { state.events.close(); state.events = null; }
}

async function signIn(event) {
  event.preventDefault();
  $("signin-error").textContent = "";
  const answer = await fetch("/ui/session", {
    method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ key: $("key").value }),
  });
  $("key").value = "";
  if (!answer.ok) { $("signin-error").textContent = (await problem(answer)).message; return; }
  state.csrf = (await answer.json()).csrf;
  start();
}

async function signOut() {
  await fetch("/ui/session", { method: "DELETE", credentials: "same-origin" });
  state.csrf = "";
  showSignIn();
}

async function start() {
  try {
    const me = await api("/whoami");
    $("who").textContent = `${me.name} (${me.role})`;
    if (!state.csrf) {
      const session = await fetch("/ui/session", { credentials: "same-origin" });
      if (!session.ok) { showSignIn(); return; }  // a cookie from before sessions: sign in again
      state.csrf = (await session.json()).csrf;
    }
  } catch (error) { return; }
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("zone").textContent = `Times are shown in ${zone}.`;
  follow();
  route();
}

// ------------------------------------------------------------------ live

function follow() {
  if (state.events) return;
  const events = new EventSource(API + "/events");  // the cookie goes with it; EventSource resumes by itself
  state.events = events;
  events.onopen = () => { $("live").textContent = "live"; };
  events.onerror = () => { $("live").textContent = "reconnecting"; };
  for (const type of ["job.created", "job.updated", "job.finished"]) {
    events.addEventListener(type, (message) => jobChanged(JSON.parse(message.data).job, type));
  }
  events.addEventListener("job.deleted", (message) => {
    if (state.page === "jobs" && state.jobs.delete(JSON.parse(message.data).id)) renderJobs();
    statsSoon();
  });
  for (const type of ["host.updated", "host.deleted", "queue.updated", "queue.deleted", "resync"]) {
    events.addEventListener(type, () => { if (state.page !== "jobs") refreshSoon(); });
  }
}

function jobChanged(job, type) {
  if (state.page === "jobs") {
    const shown = state.jobs.has(job.id);
    const fits = matches(job) && (shown || (type === "job.created" && !state.next && state.jobs.size < PAGE_SIZE));
    if (fits) state.jobs.set(job.id, { ...(state.jobs.get(job.id) || {}), ...job });
    else if (shown) state.jobs.delete(job.id);
    if (fits || shown) renderJobs();
    statsSoon();
  } else if (state.page === "job" && location.hash === "#/job/" + job.id) {
    refreshSoon();
  } else if (state.page === "overview" || state.page === "queues") {
    refreshSoon();
  }
}

// A burst of events is one refresh, at most every second.
function refreshSoon() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = 0; route(true); }, 1000);
}

function statsSoon() {
  if (state.statsTimer) return;
  state.statsTimer = setTimeout(() => { state.statsTimer = 0; queueCounts().catch(showError); }, 1000);
}

function route(again) {
  showError(null);
  const hash = location.hash || "#/";
  const [, page, arg] = hash.match(/^#\/([a-z]*)\/?(.*)$/) || [null, "", ""];
  state.page = page || "overview";
  for (const section of document.querySelectorAll(".page")) section.hidden = section.id !== state.page;
  const show = { overview, hosts, queues, jobs, job }[state.page];
  if (show) show(decodeURIComponent(arg), again === true).catch(showError);
}

// ------------------------------------------------------------------ tables

function facts(list, pairs) {
  list.replaceChildren();
  for (const [name, value] of pairs) { list.append(el("dt", name), el("dd", value)); }
}

function rows(table, items, cells) {
  const body = table.querySelector("tbody");
  body.replaceChildren(...items.map((item) => {
    const row = el("tr");
    for (const [text, cls] of cells(item)) row.append(el("td", text, cls));
    return row;
  }));
}

async function stats() {
  try {
    state.stats = await api("/stats");
  } catch (error) {
    state.stats = { unavailable: error.message };
  }
  return state.stats;
}

// ------------------------------------------------------------------ pages

async function overview() {
  const [status, counted] = await Promise.all([api("/status"), stats()]);
  const leader = (status.replicas || []).find((r) => r.role === "leader");
  const pairs = [
    ["Cluster", status.cluster_id],
    ["Leader", leader ? `replica ${leader.id} (term ${leader.term})` : "none"],
    ["Scheduler", status.scheduler_lease_holder || "none holds the lease"],
  ];
  if (counted.unavailable) {
    facts($("overview-facts"), pairs);
    $("stats-note").textContent = `Counts are not available: ${counted.unavailable}`;
    return;
  }
  if (counted.hosts) {
    const by = counted.hosts.by_status;
    const all = Object.entries(by).filter(([k]) => k !== "closed").reduce((n, [, v]) => n + v, 0);
    pairs.push(["Hosts up", `${by.HOST_OK || 0} of ${all}${by.closed ? `, ${by.closed} closed` : ""}`]);
    pairs.push(["Slots in use", `${counted.slots.used} of ${counted.slots.total}`]);
  }
  pairs.push(["Jobs", `${counted.jobs.total}${counted.jobs_visible === "own" ? " (yours)" : ""}`]);
  facts($("overview-facts"), pairs);
  const series = counted.series;
  const estimated = ms(series.estimated_until_ms);
  $("stats-note").textContent = estimated ? `Points before ${time(estimated)} are estimated from the jobs' ` +
    "times; empty minutes are ones the gateway did not follow." : "";
  xceCharts.lineChart("chart-pending", series.times_ms, series.pending);
  xceCharts.lineChart("chart-running", series.times_ms, series.running);
  if (series.slots_used) {
    const percent = series.slots_used.map((u, i) => (u === null || !series.slots_total[i] ? null
      : Math.round((1000 * u) / series.slots_total[i]) / 10));
    xceCharts.lineChart("chart-slots", series.times_ms, { "slots used": percent }, "%");
  }
  const states = [...new Set(Object.values(counted.jobs.by_queue).flatMap((row) => Object.keys(row)))].sort();
  const head = $("queue-states").querySelector("thead tr");
  head.replaceChildren(el("th", "Queue"), ...states.map((s) => el("th", s)), el("th", "Total"));
  rows($("queue-states"), Object.entries(counted.jobs.by_queue), ([queue, row]) => [[queue],
    ...states.map((s) => [row[s] || 0, "state-" + s]), [Object.values(row).reduce((a, b) => a + b, 0)]]);
  const reasons = Object.entries(counted.pending).flatMap(([queue, row]) =>
    Object.entries(row).map(([reason, n]) => [queue, reason, n]));
  rows($("pending-reasons"), reasons, ([queue, reason, n]) => [[queue], [reasonText(reason)], [n]]);
  xceCharts.hostGrid("overview-grid", counted.hosts ? counted.hosts.grid : []);
}

function reasonText(code) {
  if (code === "PENDING_REASON_UNSPECIFIED") return "waiting for the scheduler";
  if (code === "ARRAY_WINDOW") return "array elements not yet released";
  return code.replace(/^PEND_/, "").toLowerCase().replace(/_/g, " ");
}

async function hosts() {
  const [list, counted] = await Promise.all([api("/hosts"), stats()]);
  if (counted.hosts) xceCharts.hostGrid("host-grid", counted.hosts.grid);
  rows($("host-table"), list.hosts || [], (h) => [[h.spec.name], [h.status], [h.spec.slots || 0],
    [h.slots_used || 0], [h.load && h.load.r1m !== undefined ? h.load.r1m.toFixed(2) : "-"],
    [h.spec.memory_mb || 0], [h.closed ? `yes: ${h.closed_reason || ""}` : "no"]]);
}

function queueTotals(counted, queue) {
  const row = (counted.jobs && counted.jobs.by_queue[queue]) || {};
  const sum = (names) => names.reduce((n, s) => n + (row[s] || 0), 0);
  return { pending: sum(["PEND", "PSUSP"]), running: sum(["RUN", "USUSP", "SSUSP"]),
    all: Object.values(row).reduce((a, b) => a + b, 0) };
}

async function queues() {
  const [list, counted] = await Promise.all([api("/queues"), stats()]);
  rows($("queue-table"), list.queues || [], (q) => {
    const n = queueTotals(counted, q.name);
    return [[q.name], [q.priority || 0], [[q.closed ? "closed" : "open", q.inactive ? "inactive" : "active"].join(", ")],
      [q.job_pick_plugin || "default"], [q.backfill || "default"], [n.pending], [n.running], [n.all]];
  });
}

function filtersOf() {
  return { user: $("f-user").value.trim(), queue: $("f-queue").value.trim(), state: $("f-state").value };
}

function matches(job) {
  const f = filtersOf();
  const spec = job.spec || {};
  return (!f.user || spec.user === f.user) && (!f.queue || spec.queue === f.queue) && (!f.state || job.state === f.state);
}

async function queueCounts() {
  const counted = await stats();
  if (counted.unavailable) { $("queue-counts").textContent = `Counts are not available: ${counted.unavailable}`; return; }
  const parts = Object.keys(counted.jobs.by_queue).map((queue) => {
    const n = queueTotals(counted, queue);
    return `${queue}: ${n.all} (${n.pending} pending, ${n.running} running)`;
  });
  $("queue-counts").textContent = parts.length ? `Jobs per queue: ${parts.join("; ")}` : "No jobs.";
}

async function jobs(arg, again) {
  if (!again) { state.pages = [""]; state.at = 0; }
  await Promise.all([jobPage(), queueCounts()]);
}

async function jobPage() {
  const f = filtersOf();
  const query = new URLSearchParams({ page_size: String(PAGE_SIZE), page_token: state.pages[state.at] });
  if (f.user) query.append("filter", `user:eq:${f.user}`);
  if (f.queue) query.append("filter", `queue:eq:${f.queue}`);
  if (f.state) query.append("filter", `state:eq:${f.state}`);
  const page = await api("/jobs?" + query);
  state.next = page.next_page_token || "";
  state.jobs = new Map(page.jobs.map((j) => [j.id, j]));
  renderJobs();
}

function turn(step) {
  if (step > 0 && state.next) { state.pages[state.at + 1] = state.next; state.at += 1; }
  else if (step < 0 && state.at > 0) state.at -= 1;
  else return;
  jobPage().catch(showError);
}

function renderJobs() {
  const list = [...state.jobs.values()].sort((a, b) => Number(a.id) - Number(b.id));
  rows($("job-table"), list, (j) => {
    const spec = j.spec || {};
    const why = j.pending_reason || (j.exit_reason ? `${j.exit_reason} (exit ${j.exit_code || 0})`
      : (j.state === "EXIT" || j.state === "DONE") ? `exit ${j.exit_code || 0}` : "");
    return [[j.id, "id"], [spec.name || "", "name"], [spec.user || ""], [spec.queue || ""], [spec.slots || 1],
      [j.state, "state state-" + j.state], [j.host || "-", "host"], [time(j.submit_time_ms)],
      [time(j.start_time_ms)], [time(j.end_time_ms)], [waited(j)], [why]];
  });
  for (const [index, row] of [...$("job-table").querySelectorAll("tbody tr")].entries()) {
    const cell = row.firstChild;
    const link = el("a", cell.textContent);
    link.href = "#/job/" + encodeURIComponent(list[index].id);
    cell.replaceChildren(link);
  }
  $("page-at").textContent = `Page ${state.at + 1}, ${list.length} jobs`;
  $("page-prev").disabled = state.at === 0;
  $("page-next").disabled = !state.next;
}

async function job(id) {
  const j = await api("/jobs/" + encodeURIComponent(id));
  const spec = j.spec || {};
  $("job-title").textContent = `Job ${j.id}: ${spec.name || (spec.command || []).join(" ")}`;
  $("job-actions").dataset.job = j.id;
  const finished = j.state === "DONE" || j.state === "EXIT";
  facts($("job-facts"), [
    ["Readable id", j.readable_id], ["State", j.state], ["User", spec.user], ["Queue", spec.queue],
    ["Slots", spec.slots || 1], ["Command", (spec.command || []).join(" ")],
    ["Why it waits", j.pending_reason || "-"], ["Host", j.host || "-"],
    ["Submitted", time(j.submit_time_ms)], ["Started", time(j.start_time_ms)], ["Ended", time(j.end_time_ms)],
    ["Waited", waited(j)], ["Attempt", j.attempt || 0], ["Preemptions", j.preemptions || 0],
    ["Exit", finished ? `${j.exit_code || 0} ${j.exit_reason || ""}` : "-"],
  ]);
  const steps = [{ time: ms(j.submit_time_ms), state: "PEND", host: "", attempt: 0, label: "submitted" }];
  for (const e of j.timeline || []) {
    steps.push({ time: ms(e.time_ms), state: e.state || "?", host: e.host || "", attempt: e.attempt || 0,
      label: e.state === "RUN" ? `dispatched to ${e.host || "?"}` : "" });
  }
  if (!(j.timeline || []).length && ms(j.start_time_ms)) {
    steps.push({ time: ms(j.start_time_ms), state: "RUN", host: j.host || "", attempt: j.attempt || 0, label: "started" });
  }
  if (!(j.timeline || []).length && ms(j.end_time_ms)) {
    steps.push({ time: ms(j.end_time_ms), state: j.state, host: j.host || "", attempt: j.attempt || 0, label: "ended" });
  }
  // A finished job's bar ends at its end (its last step, DONE or EXIT, then shows as a sliver).
  const until = finished ? Math.max(ms(j.end_time_ms), steps[steps.length - 1].time + 1) : Date.now();
  xceCharts.timelineBar("job-timeline", steps, until);
  rows($("job-events"), steps, (s) => [[time(s.time)], [s.label ? `${s.state} (${s.label})` : s.state, "state-" + s.state],
    [s.host || "-"], [s.attempt]]);
  for (const [stream, target] of [["stdout", "job-output"], ["stderr", "job-errors"]]) {
    try {
      $(target).textContent = j.host
        ? await api(`/jobs/${encodeURIComponent(id)}/output?stream=${stream}&tail=16384`) || "(empty)" : "(not run yet)";
    } catch (error) {
      $(target).textContent = `(output not available: ${error.message})`;
    }
  }
}

// ------------------------------------------------------------------ actions

function confirmed(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    $("confirm-no").focus();
  });
}

async function act(event) {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const id = $("job-actions").dataset.job;
  const action = button.dataset.action;
  $("action-result").textContent = "";
  if (!(await confirmed(`${ACTIONS[action]} job ${id}?`))) return;
  try {
    const done = await write(`/jobs/${encodeURIComponent(id)}/actions`, { action });
    $("action-result").textContent = `${ACTIONS[action]}: done; the job is ${done.state}.`;
    refreshSoon();
  } catch (error) {
    $("action-result").textContent = `${ACTIONS[action]} refused: ${error.message}`;
  }
}

window.addEventListener("hashchange", () => route());
document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); jobs().catch(showError); });
  $("page-prev").addEventListener("click", () => turn(-1));
  $("page-next").addEventListener("click", () => turn(1));
  $("job-actions").addEventListener("click", (event) => { act(event).catch(showError); });
  start();
});
