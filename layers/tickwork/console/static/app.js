// The console's shell: sign-in, the navigation, and a router over `#/view/...` addresses
// (the hash: one page, nothing for the server to route, and a reload keeps the view).
import { api, SignedOut, whenSignedOut } from "./api.js";
import { errorBox } from "./ui.js";
import { session, saveDrafts, restoreDrafts, takeReturn } from "./session.js";
import { finishOidc, signInPage, takeFragment } from "./signin.js";
import { h, clear, browserZone, canonicalZone, loadZones } from "./util.js";
import * as calendar from "./views/calendar.js";
import * as action from "./views/action.js";
import * as failures from "./views/failures.js";
import * as upcoming from "./views/upcoming.js";
import * as lists from "./views/lists.js";
import * as operations from "./views/operations.js";

const VIEWS = [
  { path: "calendar", label: "Calendar", view: calendar },
  { path: "upcoming", label: "Upcoming", view: upcoming },
  { path: "failures", label: "Failures", view: failures },
  { path: "schedules", label: "Schedules", view: lists.schedules },
  { path: "rules", label: "Rules", view: lists.rules },
  { path: "campaigns", label: "Campaigns", view: lists.campaigns },
  { path: "recipients", label: "Recipients", view: lists.recipients },
  { path: "operations", label: "Operations", view: operations, admin: true },
];
const HIDDEN = [{ path: "actions", view: action }];

const main = document.getElementById("main");
let config = { oidc: null };
let workspace = null;
let rendering = 0;

const ctx = {
  get workspace() { return workspace; },
  get isAdmin() { return Boolean(workspace && workspace.role === "admin"); },
  get subject() { return session.subject(); },
  get zone() { return canonicalZone(localStorage.getItem("tickwork.zone") || browserZone()); },
  setZone(zone) { localStorage.setItem("tickwork.zone", zone); },
  navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
  announce(text) {
    const live = document.getElementById("announce");
    live.textContent = "";
    setTimeout(() => { live.textContent = text; }, 50);
  },
  restoreDrafts,
};

function parseHash() {
  const [path, search = ""] = (location.hash.replace(/^#\/?/, "") || "calendar").split("?");
  const [name, ...rest] = path.split("/");
  return { name, rest, params: new URLSearchParams(search) };
}

function showSignIn(reason) {
  if (session.get()) saveDrafts();
  session.clear();
  workspace = null;
  document.getElementById("top").hidden = true;
  signInPage(main, { oidc: config.oidc, reason, onSignedIn: start });
}

function renderNav(active) {
  const nav = document.getElementById("nav");
  clear(nav, VIEWS.filter((v) => !v.admin || ctx.isAdmin).map((v) =>
    h("li", {}, h("a", { href: `#/${v.path}`, "aria-current": v.path === active ? "page" : null }, v.label))));
  clear(document.getElementById("who"),
    h("span", { class: "ws", title: workspace.id }, workspace.name),
    h("span", { class: `role role-${workspace.role}` }, workspace.role),
    h("button", { type: "button", class: "link", onclick: () => { session.clear(); showSignIn("Signed out."); } }, "Sign out"));
}

async function route(event) {
  if (!workspace) return;
  const moved = Boolean(event && event.type === "hashchange");
  const turn = ++rendering;
  const { name, rest, params } = parseHash();
  const entry = [...VIEWS, ...HIDDEN].find((v) => v.path === name) || VIEWS[0];
  renderNav(entry.path);
  clear(main, h("p", { class: "loading", role: "status" }, "Loading…"));
  try {
    const node = await entry.view.render(ctx, rest, params);
    if (turn !== rendering) return; // a later navigation won
    clear(main, node);
    restoreDrafts(main);
    document.title = `${entry.label || "Action"} · Tickwork`;
    const heading = main.querySelector("h1");
    heading?.setAttribute("tabindex", "-1");
    // Moving within the console, a screen reader starts at the new view's heading (a
    // page load starts at the top, where the skip link is).
    if (moved && !params.get("focus")) heading?.focus();
  } catch (error) {
    if (error instanceof SignedOut) return;
    if (turn !== rendering) return;
    clear(main, h("h1", {}, entry.label || "Action"), errorBox(error));
  }
}

async function start() {
  try {
    workspace = await api("GET", "/v1/workspace");
  } catch (error) {
    if (error instanceof SignedOut) return;
    session.clear();
    showSignIn(`${error.message}`);
    return;
  }
  document.getElementById("top").hidden = false;
  const back = takeReturn();
  if (back && back !== location.hash) location.hash = back;
  else route();
}

async function boot() {
  whenSignedOut((reason) => showSignIn(reason));
  const zonesLoaded = loadZones();
  try {
    config = await (await fetch("config.json", { cache: "no-store" })).json();
  } catch {
    config = { oidc: null };
  }
  await zonesLoaded;
  takeFragment();
  const refused = await finishOidc(config.oidc);
  if (refused) {
    showSignIn(refused);
    return;
  }
  if (!session.get()) {
    showSignIn(null);
    return;
  }
  start();
}

window.addEventListener("hashchange", route);
boot();
