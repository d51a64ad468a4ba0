// Operations (workspace admins): backlog and lag per action type over the last hours as
// charts, outcomes by error code, queue and dead-letter depths with redrive, the kill
// switches and paused types, and warnings in plain words. One call: GET /v1/operations.
import { api } from "../api.js";
import { h, wall, pad, duration } from "../util.js";
import { badge, typeTag, errorBox } from "../ui.js";

const WIDTH = 560;
const HEIGHT = 140;
const PAD = 28;

// A small line chart in SVG (attributes only: nothing the CSP would refuse).
function chart(title, points, zone, format) {
  const values = points.map((p) => p.value).filter((v) => v !== null && v !== undefined);
  const top = Math.max(1, ...values);
  const n = Math.max(1, points.length - 1);
  const x = (i) => PAD + (i * (WIDTH - 2 * PAD)) / n;
  const y = (v) => HEIGHT - PAD - (v / top) * (HEIGHT - 2 * PAD);
  const path = points.map((p, i) => (p.value === null || p.value === undefined ? null : `${x(i)},${y(p.value)}`)).filter(Boolean).join(" ");
  const labels = points.length ? [0, Math.floor(points.length / 2), points.length - 1] : [];
  const description = values.length ? `${title}: from ${format(values[0])} to ${format(values[values.length - 1])}, highest ${format(top)}` : `${title}: no data`;
  return h("figure", { class: "chart" },
    h("svg:svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": description },
      h("svg:line", { x1: PAD, y1: HEIGHT - PAD, x2: WIDTH - PAD, y2: HEIGHT - PAD, class: "axis" }),
      h("svg:text", { x: 2, y: PAD, class: "tick" }, format(top)),
      h("svg:text", { x: 2, y: HEIGHT - PAD, class: "tick" }, "0"),
      labels.map((i) => h("svg:text", { x: x(i), y: HEIGHT - 8, class: "tick", "text-anchor": "middle" }, (() => { const w = wall(new Date(points[i].at), zone); return `${pad(w.hour)}:${pad(w.minute)}`; })())),
      path ? h("svg:polyline", { points: path, class: "line" }) : null),
    h("figcaption", {}, title));
}

function seriesCharts(series, zone) {
  if (!series.length) return h("p", { class: "empty" }, "Nothing was due in this window.");
  return series.map((s) => h("div", { class: "card" },
    h("h3", {}, typeTag(s.action_type)),
    h("div", { class: "charts" },
      chart("Backlog (due, not finished)", s.buckets.map((b) => ({ at: b.start, value: b.backlog })), zone, (v) => String(Math.round(v))),
      chart("Lag p99", s.buckets.map((b) => ({ at: b.start, value: b.lag_p99_ms })), zone, (v) => duration(v)))));
}

function outcomesTable(outcomes) {
  if (!outcomes.length) return h("p", { class: "muted" }, "No outcome in this window.");
  return h("table", { class: "list" }, h("caption", {}, "Outcomes"),
    h("thead", {}, h("tr", {}, ["Type", "Outcome", "Error code", "Rows"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, outcomes.map((o) => h("tr", {}, h("td", {}, typeTag(o.action_type)), h("td", {}, badge(o.status)),
      h("td", {}, h("code", {}, o.error_code || "")), h("td", { class: "num" }, String(o.count))))));
}

function queuesTable(ctx, queues) {
  const slot = h("div", { "aria-live": "polite" });
  const redrive = async (button, actionType) => {
    button.disabled = true;
    try {
      const answer = await api("POST", "/v1/operations/redrive", actionType ? { action_type: actionType } : {});
      const lines = answer.redriven.map((r) => (r.error ? `${r.action_type}: ${r.error}` : `${r.action_type}: ${r.moved} dead letter(s) back to the queue (${r.method})`));
      ctx.announce("Redrive started.");
      slot.replaceChildren(h("p", { role: "status" }, lines.join("; ") || "No queue to redrive."));
    } catch (error) {
      slot.replaceChildren(errorBox(error));
    } finally {
      button.disabled = false;
    }
  };
  const rows = (queues.by_action_type || []).map((q) => [q.action_type, q]);
  return h("div", {},
    h("table", { class: "list" }, h("caption", {}, `Queues (the stack's, all workspaces; ${queues.source})`),
      h("thead", {}, h("tr", {}, ["Type", "Visible", "In flight", "Delayed", "Dead letters", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows.map(([type, q]) => h("tr", {}, h("td", {}, typeTag(type)),
        q.error ? h("td", { colspan: 4 }, q.error) : [
          h("td", { class: "num" }, String(q.visible ?? "")), h("td", { class: "num" }, String(q.in_flight ?? "")),
          h("td", { class: "num" }, String(q.delayed ?? "")), h("td", { class: ["num", q.dead_letters ? "bad" : null] }, String(q.dead_letters ?? ""))],
        h("td", {}, q.dead_letters ? h("button", { type: "button", class: "small", onclick: (e) => redrive(e.currentTarget, type) }, "Redrive") : null))))),
    slot);
}

export async function render(ctx, _rest, params) {
  const zone = ctx.zone;
  const hours = Math.min(48, Math.max(1, Number(params.get("hours")) || 6));
  const ops = await api("GET", `/v1/operations?hours=${hours}`);
  const switches = ops.switches || {};
  return h("section", { "aria-labelledby": "ops-title" },
    h("h1", { id: "ops-title" }, "Operations"),
    h("div", { class: "segmented", role: "group", "aria-label": "Window" },
      [1, 6, 24, 48].map((n) => h("a", { class: "button", href: `#/operations?hours=${n}`, "aria-current": n === hours ? "true" : null }, `${n} h`))),
    h("section", { class: "card", "aria-labelledby": "warnings-title" }, h("h2", { id: "warnings-title" }, "Warnings"),
      (ops.warnings || []).length
        ? h("ul", { class: "warnings" }, ops.warnings.map((w) => h("li", { class: "warning", dataset: { code: w.code } }, h("strong", {}, w.code), ": ", w.message)))
        : h("p", { class: "ok" }, "Nothing needs attention.")),
    h("section", { class: "card", "aria-labelledby": "switches-title" }, h("h2", { id: "switches-title" }, "Kill switches and clock"),
      h("p", {}, "Dispatch: ", switches.dispatch_enabled === false ? h("strong", { class: "bad" }, "OFF") : h("strong", {}, "on"),
        "; paused types: ", (switches.paused_action_types || []).join(", ") || "none", "."),
      h("p", { class: "help" }, "They are the stack's settings (DispatchEnabled, PausedActionTypes): change them by a deploy."),
      ops.clock ? h("p", {}, `Clock: the database and the functions differ by ${duration(Math.abs(ops.clock.skew_seconds) * 1000)} (tolerance ${duration(ops.clock.tolerance_seconds * 1000)}).`) : null),
    h("section", { "aria-labelledby": "series-title" }, h("h2", { id: "series-title" }, `Backlog and lag, last ${hours} h (${zone})`), seriesCharts(ops.series || [], zone)),
    h("section", { class: "card" }, outcomesTable(ops.outcomes || [])),
    h("section", { class: "card" }, queuesTable(ctx, ops.queues || {})));
}
