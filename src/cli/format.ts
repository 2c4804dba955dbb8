// Plain-text output for kubectl-stockade, shaped like kubectl's: aligned columns, short ages. Pure.
import { DateTime } from "luxon";

/** Columns separated by three spaces like kubectl get; the last column is not padded. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  return all
    .map((r) =>
      headers
        .map((_, i) => (i === headers.length - 1 ? (r[i] ?? "") : (r[i] ?? "").padEnd(widths[i] ?? 0)))
        .join("   ")
        .trimEnd(),
    )
    .join("\n");
}

/** kubectl's HumanDuration: 45s, 3m20s, 42m, 5h3m, 30h, 3d4h, 20d, 2y10d, 9y. */
export function humanDuration(seconds: number): string {
  if (seconds < -1) return "<invalid>";
  const s = Math.max(0, Math.floor(seconds));
  const m = Math.floor(s / 60);
  const h = Math.floor(s / 3600);
  const d = Math.floor(h / 24);
  const both = (a: number, ua: string, b: number, ub: string) => (b === 0 ? `${a}${ua}` : `${a}${ua}${b}${ub}`);
  if (s < 120) return `${s}s`;
  if (m < 10) return both(m, "m", s % 60, "s");
  if (m < 180) return `${m}m`;
  if (h < 8) return both(h, "h", m % 60, "m");
  if (h < 48) return `${h}h`;
  if (h < 24 * 8) return both(d, "d", h % 24, "h");
  if (d < 365 * 2) return `${d}d`;
  if (d < 365 * 8) return both(Math.floor(d / 365), "y", d % 365, "d");
  return `${Math.floor(d / 365)}y`;
}

export const toDateTime = (v: DateTime | Date | string | undefined | null): DateTime | undefined => {
  if (v === undefined || v === null) return undefined;
  const d = DateTime.isDateTime(v) ? v : typeof v === "string" ? DateTime.fromISO(v) : DateTime.fromJSDate(v);
  return d.isValid ? d : undefined;
};

/** Time since `t` as kubectl prints an age; "-" when unknown. */
export function age(t: DateTime | Date | string | undefined | null, now: DateTime): string {
  const d = toDateTime(t);
  return d ? humanDuration(now.diff(d).as("seconds")) : "-";
}

/** UTC timestamp to the second, "-" when unknown. */
export function iso(t: DateTime | Date | string | undefined | null): string {
  return toDateTime(t)?.toUTC().set({ millisecond: 0 }).toISO({ suppressMilliseconds: true }) ?? "-";
}

/** A timestamp with its age: "2026-01-01T00:00:00Z (35s ago)". */
export function when(t: DateTime | Date | string | undefined | null, now: DateTime): string {
  const d = toDateTime(t);
  return d ? `${iso(d)} (${age(d, now)} ago)` : "never";
}

/** One line, at most `max` characters, so a long agent message does not break a table. */
export function clip(s: string | undefined, max = 80): string {
  const one = (s ?? "").replace(/\s+/g, " ").trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

export const dash = (s: string | number | undefined | null): string => (s === undefined || s === null || s === "" ? "-" : String(s));

/** Indents every line of a block. */
export const indent = (s: string, by = "  "): string =>
  s
    .split("\n")
    .map((l) => (l ? by + l : l))
    .join("\n");
