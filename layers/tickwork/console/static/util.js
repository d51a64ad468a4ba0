// DOM and time helpers. Everything on the page is built with `h`, which sets text, never
// HTML: what a tenant stored (payloads, names, errors) cannot become markup.

export function h(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      node.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

// ---------------------------------------------------------------- time zones

// The zones offered, by their current IANA names (the console's zones.json, read once at
// start): the browser's own list has old names beside new ones (Asia/Calcutta and
// Asia/Kolkata), and reports the old one as its own zone.
let known = { zones: [], aliases: {} };

export async function loadZones() {
  try {
    const answer = await (await fetch("zones.json", { cache: "no-store" })).json();
    known = { zones: answer.zones || [], aliases: answer.aliases || {} };
  } catch {
    known = { zones: [], aliases: {} };
  }
}

// A zone by its current name: Asia/Calcutta is Asia/Kolkata.
export function canonicalZone(zone) {
  return known.aliases[zone] || zone;
}

export function zones() {
  if (known.zones.length) return known.zones;
  const all = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return all.includes("UTC") ? all : ["UTC", ...all];
}

export function browserZone() {
  return canonicalZone(Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
}

const partFormats = new Map();

// The wall clock in `zone` at `instant` (a Date): {year, month (1-12), day, hour, minute, second, weekday (0 = Monday)}.
export function wall(instant, zone) {
  let format = partFormats.get(zone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-GB", {
      timeZone: zone, hourCycle: "h23", weekday: "short",
      year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit",
    });
    partFormats.set(zone, format);
  }
  const parts = {};
  for (const part of format.formatToParts(instant)) parts[part.type] = part.value;
  const weekdays = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
  return {
    year: Number(parts.year), month: Number(parts.month), day: Number(parts.day),
    hour: Number(parts.hour), minute: Number(parts.minute), second: Number(parts.second),
    weekday: weekdays.indexOf(parts.weekday),
  };
}

// The instant at which the wall clock in `zone` reads y-m-d h:mi (the later reading in a
// repeated hour; a skipped time is moved forward by the gap, as the API does).
export function instantOf(zone, year, month, day, hour = 0, minute = 0) {
  const target = Date.UTC(year, month - 1, day, hour, minute);
  let guess = target;
  for (let i = 0; i < 3; i += 1) {
    const seen = wall(new Date(guess), zone);
    const shown = Date.UTC(seen.year, seen.month - 1, seen.day, seen.hour, seen.minute);
    if (shown === target) break;
    guess += target - shown;
  }
  return new Date(guess);
}

// A calendar date (no zone) as {year, month, day}, and arithmetic on it.
export function addDays(date, days) {
  const d = new Date(Date.UTC(date.year, date.month - 1, date.day + days));
  return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() };
}

export function isoDate(date) {
  return `${date.year}-${pad(date.month)}-${pad(date.day)}`;
}

export function parseDate(text) {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text || "");
  return match ? { year: Number(match[1]), month: Number(match[2]), day: Number(match[3]) } : null;
}

export function weekdayOf(date) {
  return (new Date(Date.UTC(date.year, date.month - 1, date.day)).getUTCDay() + 6) % 7;
}

export function pad(n) {
  return String(n).padStart(2, "0");
}

export function hhmm(instant, zone) {
  const w = wall(instant, zone);
  return `${pad(w.hour)}:${pad(w.minute)}`;
}

export function stamp(value, zone) {
  if (!value) return "";
  const instant = value instanceof Date ? value : new Date(value);
  const w = wall(instant, zone);
  return `${w.year}-${pad(w.month)}-${pad(w.day)} ${pad(w.hour)}:${pad(w.minute)}:${pad(w.second)}`;
}

export function monthName(date) {
  return new Date(Date.UTC(date.year, date.month - 1, 1)).toLocaleString("en-GB", { month: "long", year: "numeric", timeZone: "UTC" });
}

export function dayName(date) {
  return new Date(Date.UTC(date.year, date.month - 1, date.day)).toLocaleString("en-GB", { weekday: "short", day: "numeric", month: "short", timeZone: "UTC" });
}

// A stable colour class (1-8) per action type, so a type keeps its colour on every view.
export function typeHue(actionType) {
  let hash = 2166136261; // FNV-1a
  for (const ch of actionType) hash = Math.imul(hash ^ ch.charCodeAt(0), 16777619) >>> 0;
  return `type-${(hash % 8) + 1}`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

// A word as a POSIX shell reads it: as it is when it is safe, else in single quotes (a
// command the page prints must work when pasted).
export function shellWord(text) {
  const word = String(text);
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}
