// The calendar: day, week or month in the viewer's zone, each action at its local time,
// coloured by status and type; a click opens it. New actions are scheduled from here.
import { api, query, connections } from "../api.js";
import { h, wall, instantOf, addDays, isoDate, parseDate, weekdayOf, pad, hhmm, monthName, dayName, zones, typeHue } from "../util.js";
import { field, formError, showError, clearErrors, fieldError } from "../ui.js";

const STATUSES = ["queued", "submitted", "published", "failed", "cancelled"];
// What a cell counts: the statuses, and the occurrences recurring schedules will make but
// have not made yet (the API's `projected`: beyond the 14 days the expander makes ahead).
const SHOWN = [...STATUSES, "projected"];
const PROJECTED_WORDS = "projected: its recurring schedule makes it later";
const PER_CELL = { day: 60, week: 4, month: 3 };

function today(zone) {
  const w = wall(new Date(), zone);
  return { year: w.year, month: w.month, day: w.day };
}

// The days a view shows: a day; Monday to Sunday; the weeks that hold the month.
function span(view, date) {
  if (view === "day") return { first: date, days: 1 };
  if (view === "week") return { first: addDays(date, -weekdayOf(date)), days: 7 };
  const start = { year: date.year, month: date.month, day: 1 };
  const first = addDays(start, -weekdayOf(start));
  const next = date.month === 12 ? { year: date.year + 1, month: 1, day: 1 } : { year: date.year, month: date.month + 1, day: 1 };
  const last = addDays(next, -1);
  const days = Math.round((Date.UTC(last.year, last.month - 1, last.day) - Date.UTC(first.year, first.month - 1, first.day)) / 86400000) + 1;
  return { first, days: Math.ceil(days / 7) * 7 };
}

function step(view, date, direction) {
  if (view === "day") return addDays(date, direction);
  if (view === "week") return addDays(date, 7 * direction);
  const month = date.month + direction;
  const year = date.year + Math.floor((month - 1) / 12);
  return { year, month: ((month - 1 + 1200) % 12) + 1, day: 1 };
}

// One call draws a view, whatever it holds: the API's calendar summary gives each local
// day (month) or hour (day, week) of the range its counts by status and first few actions.
async function fetchView(view, zone, first, days, filters) {
  const end = addDays(first, days);
  const answer = await api("GET", `/v1/calendar?${query({
    from: instantOf(zone, first.year, first.month, first.day).toISOString(),
    to: instantOf(zone, end.year, end.month, end.day).toISOString(),
    timezone: zone, unit: view === "month" ? "day" : "hour", per_bucket: PER_CELL[view], ...filters,
  })}`);
  const cells = new Map();
  for (const bucket of answer.buckets) cells.set(bucket.start.slice(0, view === "month" ? 10 : 13), bucket);
  return { cells, projectionComplete: answer.projection_complete !== false };
}

const NONE = { total: 0, counts: {}, items: [] };

function cellOf(cells, date, hour) {
  return cells.get(hour === undefined ? isoDate(date) : `${isoDate(date)}T${pad(hour)}`) || NONE;
}

function chip(item, zone, view) {
  const at = new Date(item.publish_at);
  const label = `${hhmm(at, zone)} ${item.action_type} · ${item.target_key}`;
  const words = item.projected ? PROJECTED_WORDS : item.status;
  // A projected occurrence has no action yet: it opens the schedules instead.
  const dataset = item.projected
    ? { schedule: item.recurring_schedule_id, status: item.status, local: hhmm(at, zone) }
    : { id: item.id, status: item.status, local: hhmm(at, zone) };
  return h("a", {
    class: ["chip", `status-${item.status}`, typeHue(item.action_type)],
    href: item.projected ? "#/schedules" : `#/actions/${item.id}`,
    title: `${label} (${words})`,
    dataset,
  }, h("span", { class: "chip-time" }, hhmm(at, zone)), " ",
  h("span", { class: "chip-type" }, item.action_type), view === "month" ? null : [" ", h("span", { class: "chip-target" }, item.target_key)],
  h("span", { class: "visually-hidden" }, `, ${words}`));
}

function more(count, date, view) {
  if (view === "day") return h("span", { class: "more-link" }, `+${count} more this hour: narrow by type or status`);
  return h("a", { class: "more-link", href: `#/calendar?view=day&date=${isoDate(date)}` }, `+${count} more`);
}

function legend() {
  return h("ul", { class: "legend", "aria-label": "Status colours" },
    SHOWN.map((s) => h("li", {}, h("span", { class: `swatch status-${s}`, "aria-hidden": "true" }), s === "projected" ? "projected (not made yet)" : s)));
}

function timeGrid(view, first, days, cells, zone) {
  const head = h("tr", {}, h("th", { scope: "col", class: "hour-col" }, h("span", { class: "visually-hidden" }, "Hour")),
    Array.from({ length: days }, (_, i) => {
      const d = addDays(first, i);
      return h("th", { scope: "col" }, h("a", { href: `#/calendar?view=day&date=${isoDate(d)}` }, dayName(d)));
    }));
  const rows = [];
  for (let hour = 0; hour < 24; hour += 1) {
    const row = [];
    for (let i = 0; i < days; i += 1) {
      const cell = cellOf(cells, addDays(first, i), hour);
      row.push(h("td", { class: cell.total ? "busy" : null, dataset: { date: isoDate(addDays(first, i)), hour: pad(hour) } },
        cell.items.map((item) => chip(item, zone, view)),
        cell.total > cell.items.length ? more(cell.total - cell.items.length, addDays(first, i), view) : null));
    }
    rows.push(h("tr", {}, h("th", { scope: "row", class: "hour-col" }, `${pad(hour)}:00`), row));
  }
  return h("table", { class: `calendar grid-${view}` },
    h("caption", { class: "visually-hidden" }, `Actions by hour, times in ${zone}`),
    h("thead", {}, head), h("tbody", {}, rows));
}

function monthGrid(first, days, cells, month, zone) {
  const names = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
  const rows = [];
  for (let week = 0; week < days / 7; week += 1) {
    const row = [];
    for (let d = 0; d < 7; d += 1) {
      const date = addDays(first, week * 7 + d);
      const cell = cellOf(cells, date);
      const counts = SHOWN.map((s) => [s, cell.counts[s] || 0]).filter(([, n]) => n);
      row.push(h("td", { class: [date.month === month ? null : "other-month", cell.total ? "busy" : null], dataset: { date: isoDate(date) } },
        h("a", { class: "day-number", href: `#/calendar?view=day&date=${isoDate(date)}`, "aria-label": `${dayName(date)}: ${cell.total} actions` }, String(date.day)),
        counts.length ? h("p", { class: "counts" }, counts.map(([s, n]) => h("span", { class: `count status-${s}` }, `${n} ${s}`))) : null,
        cell.items.map((item) => chip(item, zone, "month")),
        cell.total > cell.items.length ? more(cell.total - cell.items.length, date, "month") : null));
    }
    rows.push(h("tr", {}, row));
  }
  return h("table", { class: "calendar grid-month" },
    h("caption", { class: "visually-hidden" }, `Actions by day, times in ${zone}`),
    h("thead", {}, h("tr", {}, names.map((n) => h("th", { scope: "col" }, n)))), h("tbody", {}, rows));
}

function zoneSelect(current, onchange, id = "zone") {
  return h("select", { id, name: "timezone", onchange }, zones().map((z) => h("option", { value: z, selected: z === current }, z)));
}

function newActionForm(ctx, date, known) {
  const zone = ctx.zone;
  const input = (name, attrs = {}) => h("input", { name, ...attrs });
  const form = h("form", { class: "card new-action", "data-draft": "new-action", "aria-labelledby": "new-title", novalidate: true },
    h("h2", { id: "new-title" }, "Schedule an action"),
    h("div", { class: "row" },
      field("Action type", input("action_type", { required: true, placeholder: "webhook", list: "known-types", autocomplete: "off" })),
      field("Target", input("target_key", { required: true, placeholder: "https://example.com/hook or an address" }))),
    h("div", { class: "row" },
      field("Date", input("date", { type: "date", required: true, value: isoDate(addDays(date, 0)) })),
      field("Time", input("time", { type: "time", required: true, value: "09:00" })),
      field("Time zone", zoneSelect(zone, null, "new-zone"))),
    field("Payload (JSON)", h("textarea", { name: "payload", rows: 3, spellcheck: "false" }, "{}"), "What the provider sends: a webhook's body, an email's subject and body, ..."),
    h("div", { class: "row" },
      field("Thing id", input("thing_id", { placeholder: "optional" })),
      field("Connection", h("select", { name: "connection_id" }, h("option", { value: "" }, "none"),
        [...known.values()].map((c) => h("option", { value: c.id }, `${c.name} (${c.provider})`))), "The connection that sends (email, SMS, posts)."),
      field("Recipient id", input("recipient_id", { placeholder: "optional" }))),
    h("div", { class: "field checkbox" }, h("input", { type: "checkbox", name: "transactional", id: "new-transactional" }),
      h("label", { for: "new-transactional" }, "Transactional (not held by quiet hours or caps)")),
    formError(),
    h("button", { type: "submit" }, "Schedule"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(form);
    const data = new FormData(form);
    let payload;
    try {
      payload = JSON.parse(String(data.get("payload") || "{}"));
    } catch (err) {
      fieldError(form, "payload", `payload: not valid JSON (${err.message})`);
      return;
    }
    const body = { action_type: data.get("action_type"), target_key: data.get("target_key"), date: data.get("date"),
      time: data.get("time"), timezone: data.get("timezone"), payload, transactional: data.get("transactional") === "on" };
    for (const name of ["thing_id", "connection_id", "recipient_id"]) if (data.get(name)) body[name] = data.get(name);
    try {
      const made = await api("POST", "/v1/actions", body);
      form.reset();
      const w = wall(new Date(made.publish_at), ctx.zone);
      ctx.announce(`Scheduled for ${made.publish_at_local}.`);
      ctx.navigate(`#/calendar?view=day&date=${w.year}-${pad(w.month)}-${pad(w.day)}&focus=${made.id}`);
    } catch (error) {
      showError(form, error);
    }
  });
  return form;
}

export async function render(ctx, _rest, params) {
  const zone = ctx.zone;
  const view = ["day", "week", "month"].includes(params.get("view")) ? params.get("view") : "week";
  const date = parseDate(params.get("date")) || today(zone);
  const filters = {};
  if (params.get("type")) filters.action_type = params.get("type");
  if (STATUSES.includes(params.get("status"))) filters.status = params.get("status");
  const { first, days } = span(view, date);

  const address = (changes) => {
    const next = new URLSearchParams({ view, date: isoDate(date), ...Object.fromEntries(params), ...changes });
    for (const [key, value] of [...next]) if (!value) next.delete(key);
    return `#/calendar?${next}`;
  };
  const [{ cells, projectionComplete }, known] = await Promise.all([fetchView(view, zone, first, days, filters), connections()]);
  const total = [...cells.values()].reduce((n, cell) => n + cell.total, 0);
  const projected = [...cells.values()].reduce((n, cell) => n + (cell.counts.projected || 0), 0);
  const types = [...new Set([...cells.values()].flatMap((cell) => cell.items.map((item) => item.action_type)))].sort();

  const title = view === "month" ? monthName(date) : view === "week" ? `Week of ${dayName(first)} ${first.year}` : `${dayName(date)} ${date.year}`;
  const toolbar = h("div", { class: "toolbar", role: "toolbar", "aria-label": "Calendar" },
    h("div", { class: "segmented", role: "group", "aria-label": "View" },
      ["day", "week", "month"].map((v) => h("a", { href: address({ view: v }), class: "button", "aria-current": v === view ? "true" : null }, v[0].toUpperCase() + v.slice(1)))),
    h("a", { class: "button", href: address({ date: isoDate(step(view, date, -1)) }), "aria-label": `Previous ${view}` }, "‹ Prev"),
    h("a", { class: "button", href: address({ date: isoDate(today(zone)) }) }, "Today"),
    h("a", { class: "button", href: address({ date: isoDate(step(view, date, 1)) }), "aria-label": `Next ${view}` }, "Next ›"),
    h("label", { for: "zone" }, "Time zone"),
    zoneSelect(zone, (event) => { ctx.setZone(event.target.value); ctx.navigate(address({})); }),
    h("label", { for: "filter-status" }, "Status"),
    h("select", { id: "filter-status", onchange: (event) => ctx.navigate(address({ status: event.target.value })) },
      h("option", { value: "" }, "all"), STATUSES.map((s) => h("option", { value: s, selected: filters.status === s }, s))),
    h("label", { for: "filter-type" }, "Type"),
    h("input", { id: "filter-type", value: filters.action_type || "", size: 10, list: "known-types", placeholder: "all",
      onchange: (event) => ctx.navigate(address({ type: event.target.value.trim() })) }));

  const grid = view === "month" ? monthGrid(first, days, cells, date.month, zone) : timeGrid(view, first, days, cells, zone);
  const made = total - projected;
  const ahead = projected
    ? ` ${projected}${projectionComplete ? "" : " or more"} projected from recurring schedules (not made yet: their rows are made 14 days ahead).`
    : "";
  const summary = h("p", { class: "muted", role: "status" },
    total ? `${made} actions.${ahead} Times in ${zone}.` : `Nothing scheduled in this ${view}. Schedule an action below, or move to another ${view}.`);
  const node = h("section", { "aria-labelledby": "calendar-title" },
    h("h1", { id: "calendar-title" }, title),
    toolbar, legend(), summary,
    h("div", { class: "grid-wrap", tabindex: "0", role: "region", "aria-label": `The ${view}` }, grid),
    h("datalist", { id: "known-types" }, types.map((t) => h("option", { value: t }))),
    newActionForm(ctx, view === "day" ? date : today(zone), known));
  const focus = params.get("focus");
  if (focus) {
    setTimeout(() => {
      const target = document.querySelector(`.chip[data-id="${CSS.escape(focus)}"]`);
      if (target) { target.classList.add("highlight"); target.focus(); }
    }, 0);
  }
  return node;
}

