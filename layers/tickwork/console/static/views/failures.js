// Failures: failed actions by type, error code, time and target, paged by the API's
// cursor; everything matching the filter retried (admins) or the pending ones cancelled in
// bulk calls (bounded, resumable, counted).
import { api, query } from "../api.js";
import { h, stamp, instantOf, addDays, isoDate, parseDate, wall } from "../util.js";
import { badge, typeTag, field, formError, showError, pagedList, errorBox } from "../ui.js";

const FILTERS = ["action_type", "error_code", "from", "to", "thing_id", "target_key", "tag"];

function defaults(zone) {
  const w = wall(new Date(), zone);
  const today = { year: w.year, month: w.month, day: w.day };
  return { from: isoDate(addDays(today, -7)), to: isoDate(addDays(today, 1)) };
}

function instant(zone, text) {
  const date = parseDate(text);
  return date ? instantOf(zone, date.year, date.month, date.day).toISOString() : null;
}

// Repeats a bulk call over its `next` cursor, showing the running count.
async function runBulk(path, body, status) {
  let totals = { matched: 0, changed: 0, skipped: 0, refused: 0 };
  let after = null;
  for (let call = 0; call < 100; call += 1) {
    const answer = await api("POST", path, { ...body, ...(after ? { after } : {}) });
    totals = {
      matched: totals.matched + answer.matched, changed: totals.changed + answer.changed,
      skipped: totals.skipped + answer.skipped,
      refused: totals.refused + Object.values(answer.refused || {}).reduce((a, b) => a + b, 0),
    };
    status.textContent = `${totals.changed} changed of ${totals.matched} matched (${totals.skipped} had moved on, ${totals.refused} refused)${answer.next ? "; going on…" : "."}`;
    after = answer.next;
    // Nothing taken yet more left: the rest is being claimed this instant; do not spin.
    if (!after || !answer.matched) break;
  }
  return totals;
}

export async function render(ctx, _rest, params) {
  const zone = ctx.zone;
  const chosen = { ...defaults(zone) };
  for (const name of FILTERS) if (params.get(name)) chosen[name] = params.get(name);
  const from = instant(zone, chosen.from);
  const to = instant(zone, chosen.to);

  const filter = h("form", { class: "card filters", "data-draft": "failures-filter", "aria-labelledby": "filter-title", novalidate: true },
    h("h2", { id: "filter-title" }, "Filter"),
    h("div", { class: "row" },
      field("Action type", h("input", { name: "action_type", value: chosen.action_type || "", placeholder: "all" })),
      field("Error code", h("input", { name: "error_code", value: chosen.error_code || "", placeholder: "all" })),
      field(`Due from (${zone})`, h("input", { type: "date", name: "from", value: chosen.from })),
      field("Due before", h("input", { type: "date", name: "to", value: chosen.to })),
      field("Thing id", h("input", { name: "thing_id", value: chosen.thing_id || "" })),
      field("Target", h("input", { name: "target_key", value: chosen.target_key || "" })),
      field("Tag", h("input", { name: "tag", value: chosen.tag || "", placeholder: "e.g. podcast:42" }))),
    formError(),
    h("button", { type: "submit" }, "Apply"));
  filter.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(filter);
    const next = new URLSearchParams();
    for (const name of FILTERS) if (String(data.get(name) || "").trim()) next.set(name, String(data.get(name)).trim());
    ctx.navigate(`#/failures?${next}`);
  });

  const listFilter = { status: "failed", from, to, action_type: chosen.action_type, error_code: chosen.error_code, thing_id: chosen.thing_id, target_key: chosen.target_key, tag: chosen.tag };
  const empty = h("p", { class: "empty" }, "No failed action matches. Widen the dates or clear a filter; a failure shows up here with its error code and the provider's reason.");
  const list = pagedList({
    head: ["Due", "Type", "Target", "Error", "Reason", "Attempts"],
    empty,
    fetchPage: (cursor) => api("GET", `/v1/actions?${query({ ...listFilter, limit: 50, cursor })}`),
    renderItem: (a) => h("tr", { dataset: { id: a.id } },
      h("td", {}, h("a", { href: `#/actions/${a.id}` }, stamp(a.publish_at, zone))),
      h("td", {}, typeTag(a.action_type)), h("td", {}, h("code", {}, a.target_key)),
      h("td", {}, badge(a.status), " ", h("code", {}, a.error_code || "")),
      h("td", { class: "excerpt" }, a.last_error || ""), h("td", {}, String(a.attempt_count))),
  });
  await list.ready;

  // The bulk calls take the same filter; their range is on the due time too. A tag is a
  // cancel's alone (every pending action carrying it): a retry in bulk takes none, so with a
  // tag chosen the retry is not offered rather than run without it.
  const bulkFilter = { action_type: chosen.action_type, error_code: chosen.error_code, thing_id: chosen.thing_id, target_key: chosen.target_key, due_from: from, due_to: to };
  for (const key of Object.keys(bulkFilter)) if (!bulkFilter[key]) delete bulkFilter[key];
  const bulkStatus = h("p", { role: "status", class: "muted" });
  const bulkError = h("div", { "aria-live": "polite" });
  const bulk = async (button, path, body, question) => {
    if (!window.confirm(question)) return;
    button.disabled = true;
    bulkError.replaceChildren();
    try {
      const totals = await runBulk(path, body, bulkStatus);
      ctx.announce(`${totals.changed} changed.`);
    } catch (error) {
      bulkError.replaceChildren(errorBox(error));
    } finally {
      button.disabled = false;
    }
  };
  const actions = h("section", { class: "card", "aria-labelledby": "bulk-title" },
    h("h2", { id: "bulk-title" }, "Everything matching the filter"),
    h("p", { class: "help" }, "Each runs as bulk calls of up to 1,000 rows until none is left; a row that moved on meanwhile is counted, not changed."),
    h("div", { class: "buttons" },
      ctx.isAdmin && !chosen.tag ? h("button", { type: "button", onclick: (e) => bulk(e.currentTarget, "/v1/actions/bulk-retry", { ...bulkFilter, status: "failed" }, "Retry every failed action matching this filter?") }, "Retry all failed") : null,
      h("button", { type: "button", class: "danger", onclick: (e) => bulk(e.currentTarget, "/v1/actions/bulk-cancel", { ...bulkFilter, ...(chosen.tag ? { tag: chosen.tag } : {}), status: "queued", error_code: undefined }, `Cancel every queued action matching this filter (type, dates, thing, target${chosen.tag ? ", tag" : ""})?`) }, "Cancel all queued")),
    ctx.isAdmin ? null : h("p", { class: "help" }, "Retrying is for workspace admins."),
    ctx.isAdmin && chosen.tag ? h("p", { class: "help" }, "Retrying in bulk takes no tag: clear it to retry the failures the rest of the filter names.") : null,
    bulkStatus, bulkError);

  return h("section", { "aria-labelledby": "failures-title" },
    h("h1", { id: "failures-title" }, "Failures"),
    filter, actions, list.node);
}
