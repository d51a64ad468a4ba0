// Who is signed in: a token and a workspace, kept in this tab's sessionStorage only (gone
// when the tab closes; never in a cookie, so never sent anywhere but the API's header).
const KEY = "tickwork.session";
const DRAFTS = "tickwork.drafts";
const RETURN = "tickwork.return";

export const session = {
  get() {
    try {
      const value = JSON.parse(sessionStorage.getItem(KEY) || "null");
      return value && value.token && value.workspace ? value : null;
    } catch {
      return null;
    }
  },
  set(token, workspace) {
    sessionStorage.setItem(KEY, JSON.stringify({ token, workspace }));
    localStorage.setItem("tickwork.workspace", workspace);
  },
  clear() {
    sessionStorage.removeItem(KEY);
  },
  lastWorkspace() {
    return localStorage.getItem("tickwork.workspace") || "";
  },
  // Who the token names (its `sub`), for the CLI commands the page prints. Read, not
  // verified: the API verifies the token; this only says whom to act as.
  subject() {
    try {
      const part = this.get().token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return String(JSON.parse(atob(part.padEnd(Math.ceil(part.length / 4) * 4, "="))).sub || "");
    } catch {
      return "";
    }
  },
};

// What the person typed, kept across a sign-in (an expired token must not lose it).
export function saveDrafts() {
  const drafts = {};
  for (const field of document.querySelectorAll("form[data-draft] [name]")) {
    const form = field.closest("form").dataset.draft;
    if (field.type === "password") continue;
    drafts[`${form}:${field.name}`] = field.type === "checkbox" ? field.checked : field.value;
  }
  sessionStorage.setItem(DRAFTS, JSON.stringify(drafts));
  sessionStorage.setItem(RETURN, location.hash || "#/calendar");
}

export function restoreDrafts(root) {
  let drafts = {};
  try {
    drafts = JSON.parse(sessionStorage.getItem(DRAFTS) || "{}");
  } catch {
    drafts = {};
  }
  let restored = 0;
  for (const field of root.querySelectorAll("form[data-draft] [name]")) {
    const key = `${field.closest("form").dataset.draft}:${field.name}`;
    if (!(key in drafts)) continue;
    if (field.type === "checkbox") field.checked = Boolean(drafts[key]);
    else field.value = drafts[key];
    delete drafts[key];
    restored += 1;
  }
  sessionStorage.setItem(DRAFTS, JSON.stringify(drafts));
  return restored;
}

export function takeReturn() {
  const hash = sessionStorage.getItem(RETURN);
  sessionStorage.removeItem(RETURN);
  return hash;
}
