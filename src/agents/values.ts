// Syntax of parameter values, shared by every agent type. Pure.
//
// Why so strict: fence agents build command lines from their options and split them on whitespace
// (fence_ipmilan: `ipmitool ... -H <ip> -p <ipport>` through shlex.split, unquoted), so a value with a space
// becomes extra flags, and one that starts with '-' can be read as a flag. Stockade's own ipmi driver passes
// argv directly, but gets the same rules: an address is an address.
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";

// RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, optional final dot.
const HOST_NAME = /^(?=.{1,253}\.?$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/** A host name or an IPv4/IPv6 literal (IPv6 also in brackets); never a URL, never flags. */
export function hostProblem(value: string): string | undefined {
  const plain = plainProblem(value);
  if (plain) return plain;
  const bare = value.startsWith("[") && value.endsWith("]") ? value.slice(1, -1) : value;
  if (isIP(bare) === 6) return undefined;
  if (bare === value && isIP(value) === 4) return undefined;
  // A numeric "host name" that is not a valid IPv4 address (256.1.1.1, 10.0.0) is a typo, not a name.
  if (/^[\d.]+$/.test(value)) return "is not a valid IPv4 address";
  if (HOST_NAME.test(value)) return undefined;
  return "must be a host name (letters, digits, '-' and '.') or an IP address";
}

/** The form two spellings of one host share: lower case, no final dot, IPv6 compressed without brackets. */
export function normalizeHost(value: string): string {
  const bare = value.startsWith("[") && value.endsWith("]") ? value.slice(1, -1) : value;
  if (isIP(bare) === 6) {
    try {
      return new URL(`http://[${bare}]/`).hostname.slice(1, -1);
    } catch {
      return bare.toLowerCase();
    }
  }
  return value.toLowerCase().replace(/\.$/, "");
}

export function portProblem(value: string): string | undefined {
  if (!/^\d{1,5}$/.test(value) || Number(value) < 1 || Number(value) > 65535) return "must be a port number 1-65535";
  return undefined;
}

// Whitespace (incl. Unicode spaces) and control characters, C0, DEL and C1.
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\s\u0000-\u001f\u007f-\u009f]/u;

/** A plain value for a command line: no whitespace or control characters, no leading '-'. */
export function plainProblem(value: string): string | undefined {
  if (value.length === 0) return "is empty";
  if (UNSAFE.test(value))
    return "contains whitespace or a control character, which a fence agent's command line would split into extra arguments";
  if (value.startsWith("-")) return "starts with '-', which a command line would read as an option";
  return undefined;
}

/** User names: what BMCs and PDUs accept, and nothing a command line or an ssh user@host could misread. */
export function usernameProblem(value: string): string | undefined {
  if (!/^[A-Za-z0-9_.@+\\][-A-Za-z0-9_.@+\\]{0,63}$/.test(value))
    return "must be 1-64 letters, digits or _ . @ + \\ - (not starting with '-')";
  return undefined;
}

/**
 * A credential from the Secret travels on the agent's stdin, one "key=value" line, so it may contain spaces;
 * but fencing.py strips each line and one pair of surrounding double quotes, and a line break would start a
 * new option.
 */
export function credentialProblem(value: string): string | undefined {
  if (value.length === 0) return "is empty";
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(value)) return "contains a line break or another control character";
  if (value.trim() !== value) return "starts or ends with whitespace, which the fence agent would strip";
  if (value.length >= 2 && value.startsWith('"') && value.endsWith('"'))
    return "is wrapped in double quotes, which the fence agent would strip";
  return undefined;
}

/** A CA bundle (redfish, webhook): at least one PEM certificate, each one parsing; why not, or undefined. */
export function caBundleProblem(pem: string): string | undefined {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) return "holds no PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)";
  for (const [i, b] of blocks.entries()) {
    try {
      new X509Certificate(b);
    } catch (e) {
      return `certificate ${i + 1} does not parse (${(e as Error).message})`;
    }
  }
  return undefined;
}
