// Pieces every view uses: error boxes, the API's message next to the field it names,
// "load more" over a cursor, status badges, a labelled field.
import { ApiError, SignedOut } from "./api.js";
import { h, typeHue } from "./util.js";

export function errorBox(error) {
  const text = error instanceof ApiError
    ? `${error.message} (${error.status ? `HTTP ${error.status}` : "no answer"}, ${error.code})`
    : String((error && error.message) || error);
  return h("p", { class: "error-box", role: "alert" }, text);
}

export function field(label, input, help) {
  const id = input.id || `f-${input.name}-${Math.random().toString(36).slice(2, 8)}`;
  input.id = id;
  const helpId = help ? `${id}-help` : null;
  const errorId = `${id}-error`;
  input.setAttribute("aria-describedby", [helpId, errorId].filter(Boolean).join(" "));
  return h("div", { class: "field" },
    h("label", { for: id }, label),
    input,
    help ? h("p", { class: "help", id: helpId }, help) : null,
    h("p", { class: "field-error", id: errorId, dataset: { for: input.name } }));
}

export function clearErrors(form) {
  for (const node of form.querySelectorAll(".field-error")) node.textContent = "";
  for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  form.querySelector(".form-error")?.replaceChildren();
}

// The API's error shown where it belongs: next to the field its details name (or its
// message starts with), else above the form's buttons. Never a blank page.
export function showError(form, error) {
  if (error instanceof SignedOut) return;
  clearErrors(form);
  const names = [];
  if (error instanceof ApiError) {
    if (error.details.field) names.push([String(error.details.field), error.message]);
    for (const problem of error.details.errors || []) names.push([String(problem.field), `${problem.field}: ${problem.problem}`]);
    if (!names.length) {
      const first = /^([a-z_]+)[ :]/.exec(error.message);
      if (first) names.push([first[1], error.message]);
    }
  }
  let placed = false;
  for (const [name, message] of names) {
    const input = form.querySelector(`[name="${CSS.escape(name.split(".")[0])}"]`);
    const slot = input && form.querySelector(`.field-error[data-for="${CSS.escape(input.name)}"]`);
    if (!slot) continue;
    slot.textContent = slot.textContent ? `${slot.textContent}; ${message}` : message;
    input.setAttribute("aria-invalid", "true");
    if (!placed) input.focus();
    placed = true;
  }
  const box = form.querySelector(".form-error");
  if (box) box.replaceChildren(errorBox(error));
}

// A problem found before asking the API (unparseable JSON), shown as the API's would be.
export function fieldError(form, name, message) {
  const input = form.querySelector(`[name="${CSS.escape(name)}"]`);
  const slot = form.querySelector(`.field-error[data-for="${CSS.escape(name)}"]`);
  slot.textContent = message;
  input.setAttribute("aria-invalid", "true");
  input.focus();
}

export function formError() {
  return h("div", { class: "form-error", "aria-live": "polite" });
}

export function badge(status) {
  return h("span", { class: `badge status-${status}` }, status);
}

export function typeTag(actionType) {
  return h("span", { class: `type-tag ${typeHue(actionType)}` }, actionType);
}

// A list that grows by the API's cursor: `fetchPage(cursor)` answers {items, next_cursor}.
export function pagedList({ fetchPage, renderItem, empty, head }) {
  const body = h("tbody");
  const more = h("button", { type: "button", class: "more", hidden: true }, "Load more");
  const status = h("p", { class: "muted", role: "status" });
  let cursor = null;
  async function load() {
    more.disabled = true;
    try {
      const page = await fetchPage(cursor);
      for (const item of page.items) body.append(renderItem(item));
      cursor = page.next_cursor || null;
      more.hidden = !cursor;
      status.textContent = body.children.length ? `${body.children.length} shown${cursor ? "; more to load" : ""}.` : "";
      if (!body.children.length) table.replaceWith(empty);
    } catch (error) {
      if (!(error instanceof SignedOut)) status.replaceChildren(errorBox(error));
    } finally {
      more.disabled = false;
    }
  }
  more.addEventListener("click", load);
  const table = h("table", { class: "list" }, h("thead", {}, h("tr", {}, head.map((title) => h("th", { scope: "col" }, title)))), body);
  const node = h("div", { class: "paged" }, table, more, status);
  return { node, ready: load() };
}

export function confirmButton(label, question, action, attrs = {}) {
  return h("button", { type: "button", ...attrs, onclick: async (event) => {
    if (question && !window.confirm(question)) return;
    event.currentTarget.disabled = true;
    try {
      await action();
    } finally {
      event.target.disabled = false;
    }
  } }, label);
}
