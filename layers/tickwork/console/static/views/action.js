// One action: where it stands and why (the API's /why), what it carries, where it came from
// and went (reschedules), its change log, every attempt from the ledger, and what a person
// can do to it now (reschedule, cancel, send now; retry for admins).
import { api } from "../api.js";
import { h, stamp, wall, pad, zones, duration, shellWord } from "../util.js";
import { badge, typeTag, field, formError, showError, errorBox } from "../ui.js";

function row(label, ...value) {
  return [h("dt", {}, label), h("dd", {}, ...value)];
}

function actionLink(id, text) {
  return h("a", { href: `#/actions/${id}` }, text || id);
}

// The CLI command that shows the same, as the signed-in person in this workspace: it works
// as printed against `tickwork dev` (the CLI acts as --user in --workspace).
function whyCommand(ctx, id) {
  return `tickwork actions why --workspace ${shellWord(ctx.workspace.id)} --user ${shellWord(ctx.subject)} ${id}`;
}

function whySection(ctx, why, zone) {
  return h("section", { class: "card why", "aria-labelledby": "why-title" },
    h("h2", { id: "why-title" }, "Why is it here?"),
    h("ol", { class: "why-steps" }, why.steps.map((s) => h("li", { dataset: { code: s.code } },
      // The separator is for screen readers, which would read the time and text as one.
      s.at ? [h("time", { datetime: s.at }, stamp(s.at, zone)), h("span", { class: "visually-hidden" }, ": ")] : null,
      h("span", { class: "why-text" }, s.text)))),
    h("p", { class: "muted" }, `As of ${stamp(why.as_of, zone)} (${zone}). The CLI shows the same: `, h("code", { class: "why-command" }, whyCommand(ctx, why.id))));
}

// The connection by its name and provider, and whether its credentials were checked; an
// unchecked one can be checked from here (POST /v1/connections/{id}/verify, any member).
function connectionCell(ctx, id, connection) {
  if (!connection) return h("code", {}, id);
  const slot = h("span", { class: "inline-error", "aria-live": "polite" });
  const verify = h("button", { type: "button", class: "small", onclick: async () => {
    verify.disabled = true;
    try {
      const result = await api("POST", `/v1/connections/${encodeURIComponent(id)}/verify`);
      ctx.announce(result.ok ? "Verified: the provider accepted its credentials." : `Not verified: ${result.message}`);
      ctx.navigate(location.hash);
    } catch (error) {
      slot.replaceChildren(errorBox(error));
      verify.disabled = false;
    }
  } }, "Verify now");
  const state = connection.verify_ok === null || connection.verify_ok === undefined
    ? ["not verified yet: ", verify, " asks the provider whether its credentials work", slot]
    : connection.verify_ok
      ? [`verified ${stamp(connection.verified_at, ctx.zone)}`]
      : [`verification failed ${stamp(connection.verified_at, ctx.zone)}: ${connection.verify_message || ""} `, verify, slot];
  return [h("span", { class: "connection-name", title: id }, connection.name), ` (${connection.provider}) · `, h("span", { class: "connection-verified" }, state)];
}

// What the provider said after it took the message (its status callbacks), if anything.
function deliveryCell(action, zone) {
  const d = action.delivery;
  if (!d) {
    return action.status === "published"
      ? h("span", { class: "muted" }, "no word from the provider since it took the message (it may send none)")
      : null;
  }
  return [badge(d.status), d.bounce ? ` ${d.bounce} bounce` : "", d.at ? ` at ${stamp(d.at, zone)}` : "", d.detail ? `: ${d.detail}` : ""];
}

function controls(ctx, action) {
  const forms = [];
  const status = h("div", { class: "form-error", "aria-live": "polite" });
  const act = async (button, method, path, body, after) => {
    button.disabled = true;
    status.replaceChildren();
    try {
      const answer = await api(method, path, body);
      ctx.announce(after(answer));
      ctx.navigate(`#/actions/${answer.id || action.id}`);
    } catch (error) {
      status.replaceChildren(errorBox(error));
      button.disabled = false;
    }
  };
  const buttons = [];
  if (action.status === "queued") {
    buttons.push(h("button", { type: "button", class: "danger", onclick: (e) => {
      if (window.confirm("Cancel this action? It will not be sent.")) act(e.currentTarget, "POST", `/v1/actions/${action.id}/cancel`, undefined, () => "Cancelled.");
    } }, "Cancel"));
    buttons.push(h("button", { type: "button", onclick: (e) => act(e.currentTarget, "POST", `/v1/actions/${action.id}/send-now`, undefined, () => "Sent now: a new action due now replaces it.") }, "Send now"));
    const zone = ctx.zone;
    const w = wall(new Date(action.publish_at), zone);
    const reschedule = h("form", { class: "card", "data-draft": `reschedule-${action.id}`, "aria-labelledby": "reschedule-title", novalidate: true },
      h("h2", { id: "reschedule-title" }, "Reschedule"),
      h("p", { class: "help" }, "Cancels this action and schedules a copy at the new time, as the API's reschedule does."),
      h("div", { class: "row" },
        field("New date", h("input", { type: "date", name: "date", required: true, value: `${w.year}-${pad(w.month)}-${pad(w.day)}` })),
        field("New time", h("input", { type: "time", name: "time", required: true, value: `${pad(w.hour)}:${pad(w.minute)}` })),
        field("Time zone", h("select", { name: "timezone" }, zones().map((z) => h("option", { value: z, selected: z === zone }, z))))),
      formError(),
      h("button", { type: "submit" }, "Reschedule"));
    reschedule.addEventListener("submit", async (event) => {
      event.preventDefault();
      const data = new FormData(reschedule);
      try {
        const made = await api("POST", `/v1/actions/${action.id}/reschedule`, { date: data.get("date"), time: data.get("time"), timezone: data.get("timezone") });
        ctx.announce(`Rescheduled to ${made.publish_at_local}.`);
        ctx.navigate(`#/actions/${made.id}`);
      } catch (error) {
        showError(reschedule, error);
      }
    });
    forms.push(reschedule);
  }
  if (action.status === "failed" && ctx.isAdmin) {
    buttons.push(h("button", { type: "button", onclick: (e) => act(e.currentTarget, "POST", `/v1/actions/${action.id}/retry`, undefined, () => "Queued again, due now.") }, "Retry"));
  }
  if (!buttons.length && !forms.length) return null;
  return h("section", { class: "controls", "aria-label": "What you can do" }, h("div", { class: "buttons" }, buttons), status, forms);
}

// Why an attempt went to a fallback provider (docs/failover.md).
const FAILOVER_REASONS = { threshold: "the first answered transiently too often", circuit_open: "the first's circuit was open" };

function providerCell(a) {
  if (!a.provider) return "";
  if (!a.failover_reason) return a.provider;
  return `${a.provider} (failed over: ${FAILOVER_REASONS[a.failover_reason] || a.failover_reason})`;
}

function attemptsTable(attempts, zone) {
  if (!attempts.length) return h("p", { class: "muted" }, "No attempt yet: the provider has not been called.");
  return h("table", { class: "list" },
    h("caption", {}, "Attempts (the ledger)"),
    h("thead", {}, h("tr", {}, ["#", "Started", "Latency", "Outcome", "Delivery", "Provider", "Provider code", "Provider message", "Reason", "Resolver"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, attempts.map((a) => h("tr", {},
      h("td", {}, String(a.attempt)), h("td", {}, stamp(a.started_at, zone)), h("td", {}, duration(a.latency_ms)),
      h("td", {}, badge(a.outcome)), h("td", {}, a.delivery ? badge(a.delivery.status) : ""), h("td", {}, providerCell(a)), h("td", {}, a.provider_code || ""), h("td", {}, a.provider_message_id || ""),
      h("td", { class: "excerpt" }, a.excerpt || ""),
      h("td", {}, a.resolution ? `${a.resolution}${a.resolved_at ? ` at ${stamp(a.resolved_at, zone)}` : ""}${a.resolution_detail ? `: ${a.resolution_detail}` : ""}` : "")))));
}

function changesTable(changes, zone) {
  if (!changes.length) return h("p", { class: "muted" }, "No change since it was scheduled.");
  return h("table", { class: "list" },
    h("caption", {}, "Change log"),
    h("thead", {}, h("tr", {}, ["When", "What", "By", "From", "To", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, changes.map((c) => h("tr", {},
      h("td", {}, stamp(c.created_at, zone)), h("td", {}, c.kind), h("td", {}, c.actor),
      h("td", {}, c.old_at ? stamp(c.old_at, zone) : ""),
      h("td", {}, c.new_at ? stamp(c.new_at, zone) : "", c.new_action_id ? [" ", actionLink(c.new_action_id, "(new action)")] : null),
      h("td", {}, c.reason || "")))));
}

export async function render(ctx, rest) {
  const id = rest[0];
  const zone = ctx.zone;
  const [action, why] = await Promise.all([api("GET", `/v1/actions/${encodeURIComponent(id)}`), api("GET", `/v1/actions/${encodeURIComponent(id)}/why?timezone=${encodeURIComponent(zone)}`)]);
  // Its connection's name (a deleted one is a 404: then its id is shown).
  const connection = action.connection_id
    ? await api("GET", `/v1/connections/${encodeURIComponent(action.connection_id)}`).catch(() => null)
    : null;
  const next = action.changes.find((c) => c.new_action_id);
  const details = h("dl", { class: "facts" },
    row("Status", badge(action.status), action.error_code ? [" ", h("code", {}, action.error_code)] : null),
    row("Due", h("time", { datetime: action.publish_at }, `${stamp(action.publish_at, zone)} (${zone})`), action.timezone ? ` · ${action.publish_at_local} in ${action.timezone}` : null),
    action.original_publish_at ? row("Asked for", stamp(action.original_publish_at, zone), " (moved by the recipient's rules)") : null,
    row("Target", h("code", {}, action.target_key)),
    action.thing_id ? row("Thing", action.thing_id) : null,
    action.recipient_id ? row("Recipient", action.recipient_id) : null,
    action.connection_id ? row("Connection", connectionCell(ctx, action.connection_id, connection)) : null,
    deliveryCell(action, zone) ? row("Delivery", deliveryCell(action, zone)) : null,
    row("Made by", action.source, action.recurring_schedule_id ? [" · schedule ", h("code", {}, action.recurring_schedule_id)] : null),
    action.resolved ? row("Wall time", `${action.resolved.wall_time} in ${action.resolved.timezone} (${action.resolved.rule}): ${action.resolved.note}`) : null,
    action.rescheduled_from ? row("Rescheduled from", actionLink(action.rescheduled_from)) : null,
    next ? row("Rescheduled to", actionLink(next.new_action_id)) : null,
    action.last_error ? row("Last error", action.last_error) : null,
    row("Attempts", `${action.attempt_count}${action.manual_retries ? ` (${action.manual_retries} manual retries)` : ""}`));
  return h("section", { "aria-labelledby": "action-title" },
    h("p", {}, h("a", { href: "#/calendar" }, "‹ Calendar")),
    h("h1", { id: "action-title" }, typeTag(action.action_type), " ", action.target_key),
    controls(ctx, action),
    whySection(ctx, why, zone),
    h("section", { class: "card", "aria-labelledby": "facts-title" }, h("h2", { id: "facts-title" }, "Details"), details),
    h("section", { class: "card", "aria-labelledby": "payload-title" }, h("h2", { id: "payload-title" }, "Payload"),
      h("p", { class: "help" }, action.source === "api" ? "As scheduled." : "As rendered from its template when the action was made."),
      h("pre", { class: "payload", tabindex: "0" }, JSON.stringify(action.payload, null, 2))),
    h("section", { class: "card" }, changesTable(action.changes, zone)),
    h("section", { class: "card" }, attemptsTable(action.attempts, zone)));
}
