// Lists of what makes actions: recurring schedules (next occurrences; pause, resume, run
// now, end), rules (enable, disable), campaigns and their enrollments (exit), recipients
// (their zone, quiet hours, caps). Each pages by the API's cursor.
import { api, query } from "../api.js";
import { h, stamp } from "../util.js";
import { badge, typeTag, pagedList, errorBox } from "../ui.js";

// A button that calls the API, then shows the list again (or the API's error beside it).
function act(ctx, label, method, path, body, { confirm: question, done } = {}) {
  const slot = h("span", { class: "inline-error", "aria-live": "polite" });
  const button = h("button", { type: "button", class: "small", onclick: async () => {
    if (question && !window.confirm(question)) return;
    button.disabled = true;
    try {
      await api(method, path, body);
      ctx.announce(done || `${label}: done.`);
      ctx.navigate(location.hash);
    } catch (error) {
      slot.replaceChildren(errorBox(error));
      button.disabled = false;
    }
  } }, label);
  return [button, slot];
}

function page(title, id, intro, list) {
  return h("section", { "aria-labelledby": id }, h("h1", { id }, title), h("p", { class: "muted" }, intro), list.node);
}

export const schedules = {
  async render(ctx) {
    const zone = ctx.zone;
    const list = pagedList({
      head: ["Schedule", "Type", "Rule", "State", "Next occurrences", ""],
      empty: h("p", { class: "empty" }, "No recurring schedule yet. Create one with POST /v1/recurring or ", h("code", {}, "tickwork api POST /v1/recurring"), ": a type, a target, an RRULE and a zone."),
      fetchPage: (cursor) => api("GET", `/v1/recurring?${query({ preview: 3, limit: 50, cursor })}`),
      renderItem: (s) => h("tr", { dataset: { id: s.id } },
        h("td", {}, h("code", { title: s.id }, s.id.slice(0, 8)), s.thing_id ? ` ${s.thing_id}` : ""),
        h("td", {}, typeTag(s.action_type), " ", h("code", {}, s.target_key)),
        h("td", {}, h("code", {}, s.rrule), h("span", { class: "muted" }, ` (${s.timezone})`)),
        h("td", {}, badge(s.status), s.paused_reason ? h("p", { class: "help" }, s.paused_reason) : null,
          s.consecutive_failures ? h("p", { class: "help" }, `${s.consecutive_failures} failed in a row`) : null),
        h("td", {}, (s.next_occurrences || []).length
          ? h("ul", { class: "plain" }, s.next_occurrences.map((o) => h("li", {}, h("time", { datetime: o.at }, stamp(o.at, zone)))))
          : h("span", { class: "muted" }, "none")),
        h("td", { class: "buttons" },
          s.status === "active" ? act(ctx, "Pause", "POST", `/v1/recurring/${s.id}/pause`, {}, { done: "Paused: its queued occurrences not yet due are cancelled." }) : null,
          s.status === "paused" ? act(ctx, "Resume", "POST", `/v1/recurring/${s.id}/resume`, undefined) : null,
          s.status === "active" ? act(ctx, "Run now", "POST", `/v1/recurring/${s.id}/run-now`, undefined, { done: "An occurrence due now was queued." }) : null,
          s.status !== "ended" ? act(ctx, "End", "POST", `/v1/recurring/${s.id}/end`, {}, { confirm: "End this schedule? It makes no more occurrences." }) : null)),
    });
    await list.ready;
    return page("Recurring schedules", "schedules-title", `Times in ${zone}.`, list);
  },
};

export const rules = {
  async render(ctx) {
    const zone = ctx.zone;
    const list = pagedList({
      head: ["Rule", "Trigger", "Action", "State", "Last error", ""],
      empty: h("p", { class: "empty" }, "No rule yet. A rule turns events (POST /v1/events) into scheduled actions; see the rules guide."),
      fetchPage: (cursor) => api("GET", `/v1/rules?${query({ limit: 50, cursor })}`),
      renderItem: (r) => h("tr", { dataset: { id: r.id } },
        h("td", {}, r.name), h("td", {}, h("code", {}, JSON.stringify(r.trigger))),
        h("td", {}, typeTag(r.action.action_type || "?")),
        h("td", {}, badge(r.enabled ? "enabled" : "disabled")),
        h("td", { class: "excerpt" }, r.last_error ? `${r.last_error} (${stamp(r.last_error_at, zone)})` : ""),
        h("td", { class: "buttons" }, act(ctx, r.enabled ? "Disable" : "Enable", "PATCH", `/v1/rules/${r.id}`, { enabled: !r.enabled }))),
    });
    await list.ready;
    return page("Rules", "rules-title", "Events matching a rule's trigger and conditions schedule its action.", list);
  },
};

export const campaigns = {
  async render(ctx, rest) {
    const zone = ctx.zone;
    if (rest[0]) return enrollments(ctx, rest[0], zone);
    const list = pagedList({
      head: ["Campaign", "Steps", "Exit events", "Made by", ""],
      empty: h("p", { class: "empty" }, "No campaign yet. A campaign is a drip of steps; enroll recipients to start it."),
      fetchPage: (cursor) => api("GET", `/v1/campaigns?${query({ limit: 50, cursor })}`),
      renderItem: (c) => h("tr", { dataset: { id: c.id } },
        h("td", {}, c.name), h("td", {}, String(c.steps.length)), h("td", {}, (c.exit_events || []).join(", ")),
        h("td", {}, c.created_by || ""), h("td", {}, h("a", { href: `#/campaigns/${c.id}` }, "Enrollments"))),
    });
    await list.ready;
    return page("Campaigns", "campaigns-title", "Drips: each enrollment walks the steps at its own pace.", list);
  },
};

async function enrollments(ctx, campaignId, zone) {
  const campaign = await api("GET", `/v1/campaigns/${encodeURIComponent(campaignId)}`);
  const list = pagedList({
    head: ["Recipient", "State", "Step", "Next send", "Current action", ""],
    empty: h("p", { class: "empty" }, "No one is enrolled. POST /v1/campaigns/{id}/enrollments enrolls a recipient."),
    fetchPage: (cursor) => api("GET", `/v1/campaigns/${encodeURIComponent(campaignId)}/enrollments?${query({ limit: 50, cursor })}`),
    renderItem: (e) => h("tr", { dataset: { id: e.id } },
      h("td", {}, e.recipient_id), h("td", {}, badge(e.status), e.exit_reason ? h("p", { class: "help" }, e.exit_reason) : null),
      h("td", {}, `${e.current_step ?? ""} of ${campaign.steps.length}`),
      h("td", {}, e.next_send_at ? stamp(e.next_send_at, zone) : ""),
      h("td", {}, e.current_action_id ? h("a", { href: `#/actions/${e.current_action_id}` }, "open") : ""),
      h("td", { class: "buttons" }, e.status === "active"
        ? act(ctx, "Exit", "POST", `/v1/enrollments/${e.id}/exit`, { reason: "exited from the console" }, { confirm: "Take this recipient out of the campaign? Its pending step is cancelled." })
        : null)),
  });
  await list.ready;
  return h("section", { "aria-labelledby": "enrollments-title" },
    h("p", {}, h("a", { href: "#/campaigns" }, "‹ Campaigns")),
    h("h1", { id: "enrollments-title" }, `${campaign.name}: enrollments`), list.node);
}

export const recipients = {
  async render(ctx) {
    const list = pagedList({
      head: ["Recipient", "Zone", "Now there", "Quiet hours", "Caps", "Sent today"],
      empty: h("p", { class: "empty" }, "No recipient yet. PUT /v1/recipients/{id} sets one's zone, quiet hours and caps."),
      fetchPage: (cursor) => api("GET", `/v1/recipients?${query({ limit: 50, cursor })}`),
      renderItem: (r) => h("tr", { dataset: { id: r.recipient_id } },
        h("td", {}, r.recipient_id), h("td", {}, r.timezone || ""), h("td", {}, r.now_local || ""),
        h("td", {}, (r.quiet_hours || []).map((q) => `${q.start}–${q.end}`).join(", ") || "none"),
        h("td", {}, Object.entries(r.caps || {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "none"),
        h("td", {}, Object.entries(r.sent_today || {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "0")),
    });
    await list.ready;
    return page("Recipients", "recipients-title", "Their zone, quiet hours and caps decide when their messages go.", list);
  },
};
