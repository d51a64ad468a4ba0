// The console's only way to data: the public /v1 API with the person's own token and
// workspace, so it can never show more than the API would.
import { session } from "./session.js";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

// Raised (after the sign-in page is shown) when the token is missing or expired.
export class SignedOut extends ApiError {}

let onSignedOut = () => {};

export function whenSignedOut(callback) {
  onSignedOut = callback;
}

export async function api(method, path, body) {
  const current = session.get();
  if (!current) {
    onSignedOut("Sign in to continue.");
    throw new SignedOut(401, "unauthorized", "not signed in");
  }
  const headers = { Authorization: `Bearer ${current.token}`, "X-Workspace-Id": current.workspace };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit",
    });
  } catch (err) {
    throw new ApiError(0, "unreachable", `The API cannot be reached (${err.message}). Is Tickwork running?`);
  }
  const text = await response.text();
  let answer = null;
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    answer = null;
  }
  if (response.ok) return answer;
  const error = (answer && answer.error) || {};
  const message = error.message || `${method} ${path} answered ${response.status}`;
  if (response.status === 401) {
    onSignedOut(message);
    throw new SignedOut(401, error.code || "unauthorized", message, error.details);
  }
  throw new ApiError(response.status, error.code || "error", message, error.details);
}

// Every page of a cursor-paged list, as one array (for ranges a view shows whole).
export async function allPages(path, params, { limit = 500, maxPages = 40 } = {}) {
  const items = [];
  let cursor = null;
  for (let page = 0; page < maxPages; page += 1) {
    const query = new URLSearchParams({ ...params, limit: String(limit) });
    if (cursor) query.set("cursor", cursor);
    const answer = await api("GET", `${path}?${query}`);
    items.push(...answer.items);
    cursor = answer.next_cursor;
    if (!cursor) return { items, complete: true };
  }
  return { items, complete: false };
}

export function query(params) {
  const clean = {};
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") clean[key] = String(value);
  }
  return new URLSearchParams(clean).toString();
}

// The workspace's connections by id, for their names (none if the list cannot be read: a
// name is a nicety, the id still shows).
export async function connections() {
  try {
    const answer = await api("GET", "/v1/connections");
    return new Map(answer.items.map((c) => [c.id, c]));
  } catch (error) {
    if (error instanceof SignedOut) throw error;
    return new Map();
  }
}
