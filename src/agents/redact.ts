// Credentials reach agents as ordinary parameters, so every text that leaves a driver or the runner is
// scrubbed of their values before it can land in a status, an Event or a log line.

// "community" is an SNMP agent's password; "hexadecimal_kg" an IPMI v2 key.
const CREDENTIAL_KEY = /pass|secret|token|key|community|_kg$/i;

export function isCredentialKey(key: string): boolean {
  return CREDENTIAL_KEY.test(key);
}

/**
 * Replaces credential values in `message` with `***`. Given parameters, the credentials are the values of
 * keys matching /pass|secret|token|key|community|_kg$/i; given a list (e.g. every value of the credentials Secret), all of it.
 */
export function redact(message: string, secrets: Record<string, string> | readonly string[]): string {
  const values = (
    Array.isArray(secrets)
      ? // Secret values as stored: also scrub them without the final newline resolveParameters strips.
        secrets.flatMap((v: string) => [v, v.replace(/\r?\n$/, "")])
      : Object.entries(secrets)
          .filter(([k]) => isCredentialKey(k))
          .map(([, v]) => v)
  )
    .filter((v) => v.length > 0)
    // Longest first, so a secret that contains another one is not left half visible.
    .sort((a, b) => b.length - a.length);
  let out = message;
  for (const v of values) out = out.split(v).join("***");
  return out;
}

/** A short, single-line excerpt of a tool's output for an error message (not redacted: callers redact). */
export function excerpt(text: string, max = 240, noise: RegExp[] = []): string {
  const lines = text
    .split(/\r?\n/)
    // Log-style prefixes ("2026-01-02 03:04:05,678 ", "> ") only take room from the message.
    .map((l) =>
      l
        .trim()
        .replace(/^\d{4}-\d\d-\d\d[ T][\d:.,]+\s*/, "")
        .replace(/^>\s*/, ""),
    )
    .filter((l) => l.length > 0 && !noise.some((n) => n.test(l)));
  if (lines.length === 0) return "(no output)";
  // Error lines say more than whatever preceded them; keep the last few of them, in order.
  const errors = lines.filter((l) => /error|fail|unable|invalid|denied|refused|timed? ?out|unauthori[sz]ed/i.test(l));
  const picked = (errors.length > 0 ? errors : lines).slice(-3).join(" | ");
  return picked.length <= max ? picked : `${picked.slice(0, max - 1)}…`;
}
