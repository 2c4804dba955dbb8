// TLS for the admission webhooks, kept by the operator itself: a CA and a serving certificate in one
// Secret (created by whichever replica comes first, replaced only by compare-and-swap), the CA written into
// the webhook configurations' caBundle. No cert-manager needed: the webhooks are part of the safety path,
// and a dependency that can be missing, late or misconfigured would be one more way for them to fail.
// Keys are made by node:crypto; node-forge only assembles and signs the X.509 structures.
import { X509Certificate, createPrivateKey, generateKeyPairSync, randomBytes } from "node:crypto";
import { isIP } from "node:net";
import type { V1Secret } from "@kubernetes/client-node";
import forge from "node-forge";

const DAY_MS = 86_400_000;
export const CA_DAYS = 3650;
export const SERVING_DAYS = 365;
/** A serving certificate is renewed this long before it expires; a CA when less than a year is left. */
export const RENEW_SERVING_DAYS = 30;
export const RENEW_CA_DAYS = 365;

function keyPair(): { publicKey: string; privateKey: string } {
  return generateKeyPairSync("rsa", {
    modulusLength: 2048,
    publicKeyEncoding: { type: "spki", format: "pem" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
  });
}

/**
 * A certificate serial from random bytes, as DER requires it: positive and minimally encoded. OpenSSL and Go refuse
 * a serial with a superfluous leading zero byte ("illegal padding"), and node-forge strips only one: the former
 * `00` + 16 random bytes gave such a serial whenever the bytes began 0x00 0x00–0x7f, one certificate in 512, and
 * tls.createSecureContext skips a CA it cannot parse without a word, so that CA verified nothing.
 * The first byte is kept in 0x40–0x7f: 126 random bits, never zero, never negative.
 */
export function serialNumberHex(random: Buffer): string {
  if (random.length < 9) throw new Error("a serial needs at least 64 random bits");
  const b = Buffer.from(random);
  b[0] = (b[0]! & 0x3f) | 0x40;
  return b.toString("hex");
}

function certificate(o: {
  subject: string;
  publicKey: string;
  issuer?: { cert: string; key: string };
  selfKey?: string;
  days: number;
  now: Date;
  ca: boolean;
  hosts?: string[];
  serial?: Buffer;
}): string {
  const c = forge.pki.createCertificate();
  c.publicKey = forge.pki.publicKeyFromPem(o.publicKey);
  c.serialNumber = serialNumberHex(o.serial ?? randomBytes(16));
  c.validity.notBefore = new Date(o.now.getTime() - 5 * 60_000); // tolerate a little clock skew
  c.validity.notAfter = new Date(o.now.getTime() + o.days * DAY_MS);
  c.setSubject([{ name: "commonName", value: o.subject }]);
  const issuer = o.issuer ? forge.pki.certificateFromPem(o.issuer.cert) : undefined;
  c.setIssuer(issuer ? issuer.subject.attributes : [{ name: "commonName", value: o.subject }]);
  c.setExtensions(
    o.ca
      ? [
          { name: "basicConstraints", cA: true, pathLenConstraint: 0, critical: true },
          { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
          { name: "subjectKeyIdentifier" },
        ]
      : [
          { name: "basicConstraints", cA: false, critical: true },
          { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
          { name: "extKeyUsage", serverAuth: true },
          {
            name: "subjectAltName",
            altNames: (o.hosts ?? []).map((h) => (isIP(h) ? { type: 7, ip: h } : { type: 2, value: h })),
          },
        ],
  );
  c.sign(forge.pki.privateKeyFromPem(o.issuer?.key ?? o.selfKey!), forge.md.sha256.create());
  return forge.pki.certificateToPem(c);
}

export function issueCa(now: Date, serial?: Buffer): { cert: string; key: string } {
  const k = keyPair();
  return {
    cert: certificate({
      subject: "stockade-webhook-ca",
      publicKey: k.publicKey,
      selfKey: k.privateKey,
      days: CA_DAYS,
      now,
      ca: true,
      serial,
    }),
    key: k.privateKey,
  };
}

export function issueServing(
  ca: { cert: string; key: string },
  hosts: string[],
  now: Date,
  serial?: Buffer,
): { cert: string; key: string } {
  const k = keyPair();
  const cert = certificate({
    subject: hosts[0] ?? "stockade-webhook",
    publicKey: k.publicKey,
    issuer: ca,
    days: SERVING_DAYS,
    now,
    ca: false,
    hosts,
    serial,
  });
  return { cert, key: k.privateKey };
}

const SAN_PREFIX = /^(DNS:|IP Address:)/;

/** The Secret's data, decoded; undefined values for missing keys. */
export function readTlsSecret(
  s: V1Secret | undefined,
): Partial<Record<"ca.crt" | "ca.key" | "tls.crt" | "tls.key" | "ca-previous.crt", string>> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(s?.data ?? {})) out[k] = Buffer.from(v, "base64").toString("utf8");
  return out;
}

/**
 * Why the Secret's certificates must be (re)issued, or undefined when they serve `hosts` well: "ca" renews the
 * CA (and the serving certificate with it), "serving" only the serving certificate.
 */
export function renewalNeeded(
  data: ReturnType<typeof readTlsSecret>,
  hosts: string[],
  now: Date,
): { what: "ca" | "serving"; why: string } | undefined {
  let ca: X509Certificate;
  try {
    if (!data["ca.crt"] || !data["ca.key"]) return { what: "ca", why: "no CA yet" };
    ca = new X509Certificate(data["ca.crt"]);
    if (!ca.ca) return { what: "ca", why: "ca.crt is not a CA certificate" };
    if (!ca.checkPrivateKey(createPrivateKey(data["ca.key"]))) return { what: "ca", why: "ca.key does not match ca.crt" };
  } catch (err) {
    return { what: "ca", why: `the CA does not parse: ${(err as Error).message}` };
  }
  if (Date.parse(ca.validTo) - now.getTime() < RENEW_CA_DAYS * DAY_MS) return { what: "ca", why: `the CA expires ${ca.validTo}` };
  try {
    if (!data["tls.crt"] || !data["tls.key"]) return { what: "serving", why: "no serving certificate yet" };
    const c = new X509Certificate(data["tls.crt"]);
    if (!c.verify(ca.publicKey)) return { what: "serving", why: "the serving certificate is not signed by the CA" };
    if (!c.checkPrivateKey(createPrivateKey(data["tls.key"]))) return { what: "serving", why: "tls.key does not match tls.crt" };
    if (Date.parse(c.validTo) - now.getTime() < RENEW_SERVING_DAYS * DAY_MS) return { what: "serving", why: `it expires ${c.validTo}` };
    const sans = new Set((c.subjectAltName ?? "").split(", ").map((s) => s.replace(SAN_PREFIX, "")));
    const missing = hosts.filter((h) => !sans.has(h));
    if (missing.length) return { what: "serving", why: `it does not name ${missing.join(", ")}` };
  } catch (err) {
    return { what: "serving", why: `the serving certificate does not parse: ${(err as Error).message}` };
  }
  return undefined;
}

/** The Secret data after renewing what renewalNeeded asked for (the previous CA stays trusted while valid). */
export function renew(data: ReturnType<typeof readTlsSecret>, what: "ca" | "serving", hosts: string[], now: Date): Record<string, string> {
  let ca = { cert: data["ca.crt"] ?? "", key: data["ca.key"] ?? "" };
  let previous = data["ca-previous.crt"] ?? "";
  if (what === "ca") {
    previous = "";
    try {
      if (ca.cert && Date.parse(new X509Certificate(ca.cert).validTo) > now.getTime()) previous = ca.cert;
    } catch {
      previous = "";
    }
    ca = issueCa(now);
  }
  const serving = issueServing(ca, hosts, now);
  return { "ca.crt": ca.cert, "ca.key": ca.key, "tls.crt": serving.cert, "tls.key": serving.key, "ca-previous.crt": previous };
}

/** When the Secret's CA and serving certificate expire (ms since the epoch); a certificate that is missing or does not parse is left out. */
export function certificateExpiries(data: ReturnType<typeof readTlsSecret>): { ca?: number; serving?: number } {
  const out: { ca?: number; serving?: number } = {};
  for (const [what, key] of [
    ["ca", "ca.crt"],
    ["serving", "tls.crt"],
  ] as const) {
    try {
      if (data[key]) out[what] = Date.parse(new X509Certificate(data[key]).validTo);
    } catch {
      // Not a certificate: renewalNeeded says so and replaces it.
    }
  }
  return out;
}

export function caBundleOf(data: Record<string, string | undefined>): string {
  return `${data["ca.crt"] ?? ""}${data["ca-previous.crt"] ?? ""}`;
}
