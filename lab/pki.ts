// Certificates for the lab control plane, made with the machine's openssl: one CA, a serving cert for
// the apiserver, client certs per component (distinct identities so RBAC and audit logs mean something)
// and the service-account signing key pair.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";

export interface ClientIdentity {
  name: string; // file stem
  cn: string;
  groups: string[];
}

export interface Pki {
  dir: string;
  caCert: string;
  caKey: string;
  serverCert: string;
  serverKey: string;
  saKey: string;
  saPub: string;
  client(name: string): { cert: string; key: string };
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    throw new Error(`openssl ${args[0]} failed: ${err.stderr?.toString() || err.message}`, { cause: e });
  }
}

export function createPki(dir: string, clients: ClientIdentity[]): Pki {
  mkdirSync(dir, { recursive: true });
  const p = (f: string) => join(dir, f);
  if (!existsSync(p("ca.crt"))) {
    openssl(
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "3650",
        "-subj",
        "/CN=stockade-lab-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
      ],
      dir,
    );
  }
  const sign = (stem: string, subj: string, ext: string) => {
    if (existsSync(p(`${stem}.crt`))) return;
    openssl(["req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout", `${stem}.key`, "-out", `${stem}.csr`], dir);
    writeFileSync(p(`${stem}.ext`), ext);
    openssl(
      [
        "x509",
        "-req",
        "-in",
        `${stem}.csr`,
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        `${stem}.ext`,
        "-out",
        `${stem}.crt`,
      ],
      dir,
    );
  };
  sign(
    "apiserver",
    "/CN=kube-apiserver",
    "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n",
  );
  for (const c of clients) {
    const subj = `/CN=${c.cn}` + c.groups.map((g) => `/O=${g}`).join("");
    sign(c.name, subj, "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n");
  }
  if (!existsSync(p("sa.key"))) {
    openssl(["genrsa", "-out", "sa.key", "2048"], dir);
    openssl(["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], dir);
  }
  return {
    dir,
    caCert: p("ca.crt"),
    caKey: p("ca.key"),
    serverCert: p("apiserver.crt"),
    serverKey: p("apiserver.key"),
    saKey: p("sa.key"),
    saPub: p("sa.pub"),
    client: (name) => ({ cert: p(`${name}.crt`), key: p(`${name}.key`) }),
  };
}

/** A kubeconfig with embedded certificates, so it can be copied elsewhere and still work. */
export function writeKubeconfig(
  file: string,
  o: { server: string; caCert: string; cert: string; key: string; user: string; cluster?: string; tlsServerName?: string },
): void {
  const b64 = (f: string) => readFileSync(f).toString("base64");
  const cluster = o.cluster ?? "stockade-lab";
  const cfg = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: cluster,
        cluster: {
          server: o.server,
          "certificate-authority-data": b64(o.caCert),
          // A forwarder's address is not in the apiserver's certificate: verify the name it does carry.
          ...(o.tlsServerName ? { "tls-server-name": o.tlsServerName } : {}),
        },
      },
    ],
    users: [{ name: o.user, user: { "client-certificate-data": b64(o.cert), "client-key-data": b64(o.key) } }],
    contexts: [{ name: cluster, context: { cluster, user: o.user } }],
    "current-context": cluster,
  };
  writeFileSync(file, JSON.stringify(cfg, null, 2), { mode: 0o600 });
}

/**
 * A serving certificate for `stem` signed by the lab CA in `dir` (createPki's), for the names in `subjectAltName`
 * (e.g. "IP:127.0.0.1"). Made once; the Redfish simulators' certificates come from here.
 */
export function signServerCert(dir: string, stem: string, subjectAltName: string): { cert: string; key: string } {
  const p = (f: string) => join(dir, f);
  if (!existsSync(p(`${stem}.crt`))) {
    openssl(["req", "-newkey", "rsa:2048", "-nodes", "-subj", `/CN=${stem}`, "-keyout", `${stem}.key`, "-out", `${stem}.csr`], dir);
    writeFileSync(
      p(`${stem}.ext`),
      `subjectAltName=${subjectAltName}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n`,
    );
    // prettier-ignore
    openssl(["x509", "-req", "-in", `${stem}.csr`, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "3650", "-extfile", `${stem}.ext`, "-out", `${stem}.crt`], dir);
  }
  return { cert: p(`${stem}.crt`), key: p(`${stem}.key`) };
}

/** A self-signed certificate for the same names, from no CA the lab trusts: what an impostor on the BMC's address shows. */
export function selfSignedCert(dir: string, stem: string, subjectAltName: string): { cert: string; key: string } {
  mkdirSync(dir, { recursive: true });
  const p = (f: string) => join(dir, f);
  if (!existsSync(p(`${stem}.crt`)))
    // prettier-ignore
    openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", `/CN=${stem}`, "-addext", `subjectAltName=${subjectAltName}`, "-keyout", `${stem}.key`, "-out", `${stem}.crt`], dir);
  return { cert: p(`${stem}.crt`), key: p(`${stem}.key`) };
}
