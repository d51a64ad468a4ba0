// Signing in: a link with the token in its fragment (`tickwork dev` prints one; the
// fragment never reaches a server or its log), the stack's OIDC issuer (authorization code
// with PKCE, a public client: no secret in the page), or a pasted token.
import { session } from "./session.js";
import { h, clear } from "./util.js";

const PKCE = "tickwork.pkce";

function base64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString(length = 32) {
  return base64url(crypto.getRandomValues(new Uint8Array(length)));
}

function redirectUri() {
  return `${location.origin}${location.pathname}`;
}

// A link's `#token=...&workspace=...`: taken, then wiped from the address and history.
export function takeFragment() {
  if (!location.hash.startsWith("#token=")) return false;
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  const workspace = params.get("workspace");
  history.replaceState(null, "", `${location.pathname}#/calendar`);
  if (token && workspace) {
    session.set(token, workspace);
    return true;
  }
  return false;
}

export async function startOidc(oidc, workspace) {
  const verifier = randomString(48);
  const state = randomString(16);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  sessionStorage.setItem(PKCE, JSON.stringify({ verifier, state, workspace }));
  const url = new URL(oidc.authorize_url);
  url.search = new URLSearchParams({
    response_type: "code", client_id: oidc.client_id, redirect_uri: redirectUri(),
    scope: oidc.scopes, state, code_challenge: base64url(digest), code_challenge_method: "S256",
  }).toString();
  location.assign(url.toString());
}

// Back from the issuer with `?code=&state=`: exchange the code (with the verifier only
// this tab holds) for a token. Returns an error message, or null when signed in / not a return.
export async function finishOidc(oidc) {
  const params = new URLSearchParams(location.search);
  if (!params.has("code") && !params.has("error")) return null;
  const pending = JSON.parse(sessionStorage.getItem(PKCE) || "null");
  sessionStorage.removeItem(PKCE);
  history.replaceState(null, "", `${location.pathname}${sessionStorage.getItem("tickwork.return") || "#/calendar"}`);
  if (params.has("error")) return `The sign-in was refused: ${params.get("error_description") || params.get("error")}`;
  if (!oidc || !pending || pending.state !== params.get("state")) {
    return "This sign-in answer does not belong to a sign-in started here; sign in again.";
  }
  let answer;
  try {
    const response = await fetch(oidc.token_url, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "authorization_code", code: params.get("code"), redirect_uri: redirectUri(),
        client_id: oidc.client_id, code_verifier: pending.verifier,
      }).toString(),
      credentials: "omit",
    });
    answer = await response.json();
    if (!response.ok) return `The identity provider refused the code: ${answer.error_description || answer.error || response.status}`;
  } catch (err) {
    return `The identity provider cannot be reached: ${err.message}`;
  }
  // API Gateway's JWT authorizer takes an access token whose `client_id` or `aud` names the
  // client; an identity provider that issues none gives the ID token.
  const token = answer.access_token || answer.id_token;
  if (!token) return "The identity provider answered without a token.";
  session.set(token, pending.workspace);
  return null;
}

export function signInPage(root, { oidc, reason, onSignedIn }) {
  const workspace = h("input", { id: "signin-workspace", name: "workspace", required: true, autocomplete: "off",
    value: session.lastWorkspace(), spellcheck: "false", "aria-describedby": "signin-workspace-help" });
  const token = h("textarea", { id: "signin-token", name: "token", rows: 4, required: true, spellcheck: "false",
    "aria-describedby": "signin-token-help" });
  const error = h("p", { class: "field-error", role: "alert", id: "signin-error" });
  const paste = h("form", { class: "card", "aria-labelledby": "paste-title", onsubmit: (event) => {
    event.preventDefault();
    const value = token.value.trim().replace(/^Bearer\s+/i, "");
    if (!workspace.value.trim()) { error.textContent = "Name the workspace you act in (its id)."; workspace.focus(); return; }
    if (value.split(".").length !== 3) { error.textContent = "That is not a JWT: paste the token itself (three parts separated by dots)."; token.focus(); return; }
    session.set(value, workspace.value.trim());
    onSignedIn();
  } },
  h("h2", { id: "paste-title" }, oidc ? "Or paste a token" : "Paste a token"),
  h("label", { for: "signin-token" }, "Bearer token"),
  token,
  h("p", { class: "help", id: "signin-token-help" }, "Locally: ", h("code", {}, "tickwork token"), " prints one, or ", h("code", {}, "tickwork console"), " prints a link that signs you in."),
  h("button", { type: "submit" }, "Sign in"));

  const oidcForm = oidc && h("form", { class: "card", "aria-labelledby": "oidc-title", onsubmit: (event) => {
    event.preventDefault();
    if (!workspace.value.trim()) { error.textContent = "Name the workspace you act in (its id)."; workspace.focus(); return; }
    startOidc(oidc, workspace.value.trim());
  } },
  h("h2", { id: "oidc-title" }, "Sign in with your identity provider"),
  h("button", { type: "submit" }, "Sign in"));

  clear(root,
    h("section", { class: "signin", "aria-labelledby": "signin-title" },
      h("h1", { id: "signin-title" }, "Sign in to Tickwork"),
      reason ? h("p", { class: "notice", role: "status" }, reason) : null,
      h("div", { class: "card" },
        h("label", { for: "signin-workspace" }, "Workspace id"),
        workspace,
        h("p", { class: "help", id: "signin-workspace-help" }, "The workspace your token is a member of (X-Workspace-Id).")),
      error,
      oidcForm,
      paste));
  (workspace.value ? (oidcForm ? oidcForm.querySelector("button") : token) : workspace).focus();
}
