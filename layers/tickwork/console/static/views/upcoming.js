// Upcoming: what will fire per hour and per provider (action type and connection) over
// the next days, against each one's hourly quota (the API's forecast): tomorrow's 09:00
// wall is visible before it hits.
import { api, connections as connectionList } from "../api.js";
import { h, wall, pad } from "../util.js";
import { typeTag } from "../ui.js";

const CHOICES = [24, 72, 168];

function level(due, peak, quota) {
  if (!due) return 0;
  const scale = quota || peak;
  return Math.min(4, Math.max(1, Math.ceil((due / scale) * 4)));
}

export async function render(ctx, _rest, params) {
  const zone = ctx.zone;
  const hours = CHOICES.includes(Number(params.get("hours"))) ? Number(params.get("hours")) : 72;
  const [forecast, known] = await Promise.all([api("GET", `/v1/forecast?hours=${hours}`), connectionList()]);
  // The forecast's hours are whole UTC hours from the one holding its start.
  const first = Math.floor(new Date(forecast.start).getTime() / 3600000) * 3600000;
  const last = new Date(forecast.end).getTime();
  const columns = [];
  for (let at = first; at < last; at += 3600000) columns.push(new Date(at));
  const rows = new Map();
  for (const bucket of forecast.buckets) {
    const key = `${bucket.action_type}|${bucket.connection_id || ""}`;
    if (!rows.has(key)) rows.set(key, { action_type: bucket.action_type, connection_id: bucket.connection_id, quota: bucket.quota_per_hour, cells: new Map() });
    rows.get(key).cells.set(new Date(bucket.hour).getTime(), bucket);
  }
  const peak = Math.max(1, ...forecast.buckets.map((b) => b.due));
  const picker = h("div", { class: "segmented", role: "group", "aria-label": "How far ahead" },
    CHOICES.map((n) => h("a", { class: "button", href: `#/upcoming?hours=${n}`, "aria-current": n === hours ? "true" : null }, n === 168 ? "7 days" : `${n} hours`)));
  const over = forecast.buckets.filter((b) => b.over_quota);
  const heading = [h("h1", { id: "upcoming-title" }, "Upcoming"), picker,
    h("p", { class: "muted" }, `What will fire in each hour from now, per action type and connection; hours in ${zone}. A cell over its hourly quota is marked.`)];
  if (!rows.size) {
    return h("section", { "aria-labelledby": "upcoming-title" }, heading,
      h("p", { class: "empty" }, `Nothing is due in the next ${hours} hours. Schedule actions from the calendar, or look further ahead.`));
  }
  // Day headers over the hour columns, in the viewer's zone.
  const days = [];
  for (const column of columns) {
    const w = wall(column, zone);
    const label = `${w.year}-${pad(w.month)}-${pad(w.day)}`;
    if (days.length && days[days.length - 1].label === label) days[days.length - 1].span += 1;
    else days.push({ label, span: 1 });
  }
  const table = h("table", { class: "heatmap" },
    h("caption", { class: "visually-hidden" }, `Actions due per hour, next ${hours} hours, ${zone}`),
    h("thead", {},
      h("tr", {}, h("td", {}), days.map((d) => h("th", { scope: "colgroup", colspan: d.span }, d.label))),
      h("tr", {}, h("th", { scope: "col" }, "Type / connection"), columns.map((c) => h("th", { scope: "col", class: "hour" }, pad(wall(c, zone).hour))))),
    h("tbody", {}, [...rows.values()].map((row) => h("tr", {},
      h("th", { scope: "row" }, typeTag(row.action_type), row.connection_id ? h("span", { class: "muted conn", title: row.connection_id }, ` ${known.get(row.connection_id)?.name || row.connection_id.slice(0, 8)}`) : null,
        row.quota ? h("span", { class: "muted" }, ` ≤ ${row.quota}/h`) : null),
      columns.map((c) => {
        const bucket = row.cells.get(c.getTime());
        const due = bucket ? bucket.due : 0;
        const label = `${due} due at ${pad(wall(c, zone).hour)}:00${bucket && bucket.over_quota ? `, over the quota of ${row.quota} per hour` : ""}`;
        return h("td", { class: [`heat-${level(due, peak, row.quota)}`, bucket && bucket.over_quota ? "over" : null], title: label, "aria-label": label }, due ? String(due) : "");
      })))));
  return h("section", { "aria-labelledby": "upcoming-title" }, heading,
    over.length ? h("p", { class: "warning", role: "status" }, `${over.length} hour(s) ahead are over their provider's quota: they will be sent late or deferred.`) : null,
    h("div", { class: "grid-wrap", tabindex: "0", role: "region", "aria-label": "Heatmap (scrolls sideways)" }, table),
    h("p", { class: "muted" }, `Totals: ${Object.entries(forecast.totals || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "none"}.`));
}
