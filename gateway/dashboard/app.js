// The XCE dashboard: plain DOM, no build step. Every value from the cluster is set as text
// (textContent), never parsed as HTML: a job named <img src=x onerror=...> is shown, not run.
// The API key is posted once to /ui/session, which keeps it in an HttpOnly, SameSite=Strict cookie;
// this script never sees it again and it never appears in a URL.
"use strict";

const API = "/xce/v1";
const state = { jobs: new Map(), events: null, page: "", refreshTimer: 0 };

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

async function api(path) {
  const answer = await fetch(API + path, { credentials: "same-origin" });
  if (answer.status === 401) { showSignIn(); throw new Error("signed out"); }
  if (!answer.ok) {
    let detail = answer.statusText;
    try { detail = (await answer.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(detail);
  }
  const kind = answer.headers.get("content-type") || "";
  return kind.startsWith("application/json") ? answer.json() : answer.text();
}

function showError(error) { $("error").textContent = error ? String(error.message || error) : ""; }

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
  if (!answer.ok) {
    let detail = "refused";
    try { detail = (await answer.json()).detail; } catch (e) { /* not JSON */ }
    $("signin-error").textContent = detail;
    return;
  }
  start();
}

async function signOut() {
  await fetch("/ui/session", { method: "DELETE", credentials: "same-origin" });
  showSignIn();
}

async function start() {
  try {
    const me = await api("/whoami");
    $("who").textContent = `${me.name} (${me.role})`;
  } catch (error) { return; }
  $("signin").hidden = true;
  $("nav").hidden = false;
  follow();
  route();
}

function follow() {
  if (state.events) return;
  const events = new EventSource(API + "/events");  // the cookie goes with it; EventSource resumes by itself
  state.events = events;
  events.onopen = () => { $("live").textContent = "live"; };
  events.onerror = () => { $("live").textContent = "reconnecting"; };
  for (const type of ["job.created", "job.updated", "job.finished"]) {
    events.addEventListener(type, (message) => jobChanged(JSON.parse(message.data).job));
  }
  events.addEventListener("job.deleted", (message) => {
    state.jobs.delete(JSON.parse(message.data).id);
    if (state.page === "jobs") renderJobs();
  });
  for (const type of ["host.updated", "host.deleted", "queue.updated", "queue.deleted", "resync"]) {
    events.addEventListener(type, () => refreshSoon());
  }
}

function jobChanged(job) {
  if (state.page === "jobs") {
    if (matches(job)) state.jobs.set(job.id, job); else state.jobs.delete(job.id);
    renderJobs();
  } else if (state.page === "job" && location.hash === "#/job/" + job.id) {
    refreshSoon();
  } else if (state.page === "overview") {
    refreshSoon();
  }
}

function refreshSoon() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = 0; route(); }, 500);
}

function route() {
  showError(null);
  const hash = location.hash || "#/";
  const [, page, arg] = hash.match(/^#\/([a-z]*)\/?(.*)$/) || [null, "", ""];
  state.page = page || "overview";
  for (const section of document.querySelectorAll(".page")) section.hidden = section.id !== state.page;
  const show = { overview, hosts, queues, jobs, job }[state.page];
  if (show) show(decodeURIComponent(arg)).catch(showError);
}

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

async function allJobs(filters) {
  const found = [];
  let token = "";
  do {
    const query = new URLSearchParams({ page_size: "5000", page_token: token });
    for (const filter of filters) query.append("filter", filter);
    const page = await api("/jobs?" + query);
    found.push(...page.jobs);
    token = page.next_page_token || "";
  } while (token && found.length < 20000);
  return found;
}

async function overview() {
  const [status, hostList, jobList] = await Promise.all([api("/status"), api("/hosts"), allJobs([])]);
  const up = (hostList.hosts || []).filter((h) => h.status === "HOST_OK");
  const leader = (status.replicas || []).find((r) => r.role === "leader");
  facts($("overview-facts"), [
    ["Cluster", status.cluster_id],
    ["Leader", leader ? `replica ${leader.id} (term ${leader.term})` : "none"],
    ["Scheduler", status.scheduler_lease_holder || "none holds the lease"],
    ["Hosts up", `${up.length} of ${(hostList.hosts || []).length}`],
    ["Slots in use", `${up.reduce((n, h) => n + (h.slots_used || 0), 0)} of ${up.reduce((n, h) => n + (h.spec.slots || 0), 0)}`],
  ]);
  const counts = new Map();
  for (const j of jobList) counts.set(j.state, (counts.get(j.state) || 0) + 1);
  rows($("states"), [...counts.entries()].sort(), ([name, n]) => [[name, "state-" + name], [n]]);
}

async function hosts() {
  const list = await api("/hosts");
  rows($("host-table"), list.hosts || [], (h) => [[h.spec.name], [h.status], [h.spec.slots || 0],
    [h.slots_used || 0], [h.spec.memory_mb || 0], [h.closed ? `yes: ${h.closed_reason || ""}` : "no"]]);
}

async function queues() {
  const list = await api("/queues");
  rows($("queue-table"), list.queues || [], (q) => [[q.name], [q.priority || 0],
    [[q.closed ? "closed" : "open", q.inactive ? "inactive" : "active"].join(", ")],
    [q.job_pick_plugin || "default"], [q.backfill || "default"]]);
}

function filtersOf() {
  return { user: $("f-user").value.trim(), queue: $("f-queue").value.trim(), state: $("f-state").value };
}

function matches(job) {
  const f = filtersOf();
  const spec = job.spec || {};
  return (!f.user || spec.user === f.user) && (!f.queue || spec.queue === f.queue) && (!f.state || job.state === f.state);
}

async function jobs() {
  const f = filtersOf();
  const wanted = [];
  if (f.user) wanted.push(`user:eq:${f.user}`);
  if (f.queue) wanted.push(`queue:eq:${f.queue}`);
  if (f.state) wanted.push(`state:eq:${f.state}`);
  state.jobs = new Map((await allJobs(wanted)).map((j) => [j.id, j]));
  renderJobs();
}

function renderJobs() {
  const list = [...state.jobs.values()].sort((a, b) => Number(b.id) - Number(a.id));
  rows($("job-table"), list, (j) => {
    const spec = j.spec || {};
    const why = j.pending_reason || (j.exit_reason ? `${j.exit_reason} (exit ${j.exit_code || 0})`
      : (j.state === "EXIT" || j.state === "DONE") ? `exit ${j.exit_code || 0}` : "");
    return [[j.id, "id"], [spec.name || "", "name"], [spec.user || ""], [spec.queue || ""], [spec.slots || 1],
      [j.state, "state state-" + j.state], [why]];
  });
  for (const [index, row] of [...$("job-table").querySelectorAll("tbody tr")].entries()) {
    const cell = row.firstChild;
    const link = el("a", cell.textContent);
    link.href = "#/job/" + encodeURIComponent(list[index].id);
    cell.replaceChildren(link);
  }
}

async function job(id) {
  const j = await api("/jobs/" + encodeURIComponent(id));
  const spec = j.spec || {};
  $("job-title").textContent = `Job ${j.id}: ${spec.name || (spec.command || []).join(" ")}`;
  facts($("job-facts"), [
    ["Readable id", j.readable_id], ["State", j.state], ["User", spec.user], ["Queue", spec.queue],
    ["Slots", spec.slots || 1], ["Command", (spec.command || []).join(" ")],
    ["Why it waits", j.pending_reason || "-"], ["Host", j.host || "-"],
    ["Exit", j.state === "DONE" || j.state === "EXIT" ? `${j.exit_code || 0} ${j.exit_reason || ""}` : "-"],
  ]);
  try {
    $("job-output").textContent = j.host ? await api(`/jobs/${encodeURIComponent(id)}/output?tail=16384`) : "(not run yet)";
  } catch (error) {
    $("job-output").textContent = `(output not available: ${error.message})`;
  }
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); jobs().catch(showError); });
  start();
});
