// The docs and examples agree with the repository: every relative link and anchor resolves, every ServiceAccount,
// Deployment and namespace a kubectl/cloud-CLI snippet names is one the bundle installs, and the example
// FencingPolicy is safe to apply as it is (a dry run over nodes labelled for a pilot, not a live policy for all).
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { loadAllYaml } from "@kubernetes/client-node";

const root = join(import.meta.dirname, "../..");
const read = (file: string) => readFileSync(join(root, file), "utf8");
const docs = (readdirSync(join(root, "docs"), { recursive: true }) as string[])
  .filter((f) => f.endsWith(".md"))
  .map((f) => `docs/${f}`)
  .sort();
const pages = ["README.md", "manifests/README.md", ...docs];
/**
 * The developers' pages: the only ones that may cite the source, the tests and the lab. docs/architecture.md is one
 * (the module map issue 29 asked for at that path), linked from the developer guide like the others.
 */
const developerPages = docs.filter((f) => f.startsWith("docs/developer/") || f === "docs/architecture.md");
/** The users' pages: every other page. */
const userPages = pages.filter((f) => !developerPages.includes(f));
const examples = readdirSync(join(root, "manifests/examples"))
  .filter((f) => f.endsWith(".yaml"))
  .map((f) => `manifests/examples/${f}`);

const fence = /^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm;
/** Markdown without code blocks and inline code: what GitHub renders links and headings from. */
const prose = (md: string) => md.replace(fence, "").replace(/`[^`\n]*`/g, "``");

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered -1, -2, … */
export function anchors(md: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  for (const m of md.replace(fence, "").matchAll(/^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$/gm)) {
    const slug = m[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/<[^>]+>/g, "")
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
      .replace(/ /g, "-");
    const n = seen.get(slug) ?? 0;
    out.add(n ? `${slug}-${n}` : slug);
    seen.set(slug, n + 1);
  }
  for (const m of md.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(m[1]!);
  return out;
}

/** Relative links of a page that do not resolve to a file (or directory) of the repository, or to a heading in it. */
export function brokenLinks(file: string, md: string, exists = (p: string) => existsSync(p)): string[] {
  const broken: string[] = [];
  for (const m of prose(md).matchAll(/\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)|^\[[^\]]+\]:\s*(\S+)/gm)) {
    const target = (m[1] ?? m[2])!;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
    const [path, anchor] = target.split("#") as [string, string | undefined];
    const abs = path ? resolve(root, dirname(file), decodeURI(path)) : join(root, file);
    if (!abs.startsWith(root + "/") || !exists(abs)) {
      broken.push(`${target} (no such file in the repository)`);
      continue;
    }
    if (anchor !== undefined && abs.endsWith(".md") && statSync(abs).isFile()) {
      const md2 = abs === join(root, file) ? md : readFileSync(abs, "utf8");
      if (!anchors(md2).has(anchor)) broken.push(`${target} (no heading #${anchor} in ${relative(root, abs)})`);
    }
  }
  return broken;
}

describe("every relative link in README.md, manifests/README.md and docs/**/*.md resolves", () => {
  for (const file of pages)
    test(file, () => {
      assert.deepEqual(brokenLinks(file, read(file)), [], `${file} links to what does not exist`);
    });
  test("the checker finds a missing file, a missing anchor and a link out of the repository", () => {
    const md = "[a](api.md#no-such-heading) [b](../shared/DESIGN.md) [c](nope.md) [ok](api.md) [x](https://x) `[d](nope2.md)`";
    assert.deepEqual(
      brokenLinks("docs/x.md", md).map((b) => b.split(" ")[0]),
      ["api.md#no-such-heading", "../shared/DESIGN.md", "nope.md"],
    );
    assert.ok(anchors("## Who may fence, confirm, unfence?\n## `a` b\n## `a` b").has("who-may-fence-confirm-unfence"));
    assert.ok(anchors("## `a` b\n## `a` b").has("a-b-1"));
  });
});

/** The ServiceAccounts, Deployments and namespaces the bundle (manifests/*.yaml) creates, as "ns/name". */
function bundle() {
  const out = { serviceAccounts: new Set<string>(), deployments: new Set<string>(), namespaces: new Set<string>() };
  // The bundle and the opt-in node agent's (manifests/node-agent/, its own namespace and ServiceAccount).
  const files = ["manifests", "manifests/node-agent"].flatMap((d) =>
    readdirSync(join(root, d))
      .filter((f) => f.endsWith(".yaml"))
      .map((f) => `${d}/${f}`),
  );
  for (const f of files) {
    for (const o of loadAllYaml(read(f)) as ({ kind?: string; metadata?: { name?: string; namespace?: string } } | null)[]) {
      const id = `${o?.metadata?.namespace}/${o?.metadata?.name}`;
      if (o?.kind === "ServiceAccount") out.serviceAccounts.add(id);
      if (o?.kind === "Deployment") out.deployments.add(id);
      if (o?.kind === "Namespace") out.namespaces.add(o.metadata!.name!);
    }
  }
  return out;
}

type Mention = { kind: "ServiceAccount" | "Deployment" | "Namespace"; id: string; line: string };
const placeholder = /^[A-Z_]+$|[<>$.]|^\.\.\.$/; // NS, <ns>, $NS: the reader's own

/**
 * The ServiceAccounts, Deployments and operator namespaces named in commands and prose: `kubectl -n NS annotate
 * serviceaccount NAME`, `kubectl -n NS rollout … deployment[/]NAME`, `system:serviceaccount:NS:NAME`,
 * `PROJECT.svc.id.goog[NS/NAME]`, `--serviceaccount=NS:NAME`, `--namespace NS … --service-account NAME`,
 * ServiceAccount `NS/NAME`; and any namespace named stockade… after -n, --namespace or namespace:.
 */
export function mentions(text: string): Mention[] {
  const out: Mention[] = [];
  // a command continued over several lines (trailing \) is one line; comment markers (#, //) are dropped
  const lines = text.replace(/\\\n\s*(?:#\s*)?/g, " ").split("\n");
  for (const line of lines) {
    const ns = /(?:\s-n|--namespace)[ =]([\w.<>$-]+)/.exec(line)?.[1];
    const add = (kind: Mention["kind"], n: string | undefined, name: string) => {
      if (placeholder.test(name) || (n && placeholder.test(n))) return;
      out.push({ kind, id: n ? `${n}/${name}` : name, line: line.trim() });
    };
    // the operator's own namespace, wherever a command or YAML names one of Stockade's
    const nsFlag = /\bkubectl\b/.test(line)
      ? /(?:\s-n|--namespace|namespace:)[ =]+(stockade[\w.-]*)/g
      : /(?:--namespace|namespace:)[ =]+(stockade[\w.-]*)/g;
    for (const m of line.replace(/\$\([^)]*\)/g, "").matchAll(nsFlag)) add("Namespace", undefined, m[1]!); // not in $(az …)
    if (/\bkubectl\b|\baws\b|\bgcloud\b|\baz\b/.test(line)) {
      for (const m of line.matchAll(/\b(?:serviceaccounts?|sa)(?:\/|\s+)([\w.<>$-]+)/gi)) if (ns) add("ServiceAccount", ns, m[1]!);
      for (const m of line.matchAll(/\b(?:deployments?(?:\.apps)?|deploy)(?:\/|\s+)([\w.<>$-]+)/gi))
        if (ns && !/^(-|stockade-system$)/.test(m[1]!)) add("Deployment", ns, m[1]!);
      const sa = /--service-account[ =]([\w.<>$-]+)/.exec(line)?.[1];
      if (sa && ns) add("ServiceAccount", ns, sa);
    }
    for (const m of line.matchAll(/system:serviceaccount:([\w.-]+):([\w.-]+)/g)) add("ServiceAccount", m[1], m[2]!);
    for (const m of line.matchAll(/\.svc\.id\.goog\[([\w.-]+)\/([\w.-]+)\]/g)) add("ServiceAccount", m[1], m[2]!);
    for (const m of line.matchAll(/--serviceaccount[ =]([\w.-]+):([\w.-]+)/g)) add("ServiceAccount", m[1], m[2]!);
    for (const m of line.matchAll(/ServiceAccount `([\w.-]+)\/([\w.-]+)`/g)) add("ServiceAccount", m[1], m[2]!);
    for (const m of line.matchAll(/(?:deployment|Deployment) `([\w.-]+)\/([\w.-]+)`/g)) add("Deployment", m[1], m[2]!);
  }
  return out;
}

/** What of the mentions the bundle does not have (every namespace has its ServiceAccount "default"). */
function unknown(text: string, b = bundle()): string[] {
  return mentions(text)
    .filter((m) =>
      m.kind === "ServiceAccount"
        ? !b.serviceAccounts.has(m.id) && !m.id.endsWith("/default")
        : m.kind === "Deployment"
          ? !b.deployments.has(m.id)
          : !b.namespaces.has(m.id),
    )
    .map((m) => `${m.kind} ${m.id}: ${m.line}`);
}

describe("the ServiceAccounts and Deployments named in the examples and docs are the bundle's", () => {
  const b = bundle();
  test("the bundle has ServiceAccount and Deployment stockade-system/stockade", () => {
    assert.deepEqual([...b.serviceAccounts], ["stockade-system/stockade", "stockade-node-agent/stockade-node-agent"]);
    assert.deepEqual([...b.deployments], ["stockade-system/stockade"]);
    assert.deepEqual([...b.namespaces], ["stockade-system", "stockade-node-agent"]);
  });
  for (const file of [...pages, ...examples])
    test(file, () => {
      assert.deepEqual(unknown(read(file), b), [], `${file} names objects the bundle does not install`);
    });
  test("the cloud examples name the operator's ServiceAccount (Workload Identity, IRSA)", () => {
    for (const f of ["25-fenceagent-aws.yaml", "50-fenceagent-gcp.yaml", "60-fenceagent-azure.yaml"]) {
      const ids = mentions(read(`manifests/examples/${f}`)).map((m) => `${m.kind} ${m.id}`);
      assert.ok(ids.includes("ServiceAccount stockade-system/stockade"), `${f}: ${ids.join(", ")}`);
    }
  });
  test("the check would have caught the old GCP and Azure examples (stockade-operator)", () => {
    const old = [
      `#     --role=roles/iam.workloadIdentityUser --member="serviceAccount:PROJECT.svc.id.goog[stockade-system/stockade-operator]"`,
      "#   kubectl -n stockade-system annotate serviceaccount stockade-operator \\",
      "#     iam.gke.io/gcp-service-account=stockade-fencer@PROJECT.iam.gserviceaccount.com",
      "#     --subject system:serviceaccount:stockade-system:stockade-operator --audiences api://AzureADTokenExchange",
      "#   kubectl -n stockade-system patch deployment stockade-operator -p \\",
      "kubectl -n stockade-system rollout status deployment/stockade-operator",
      "kubectl -n other rollout restart deploy stockade",
      "kubectl -n stockade get pods",
      "az identity create -g RG -n stockade-fencer",
      "  credentialsSecretRef: { namespace: stockade-operator, name: gcp-fencer-key }",
      "aws eks create-pod-identity-association --cluster-name C --namespace stockade-system --service-account stockade-op",
    ].join("\n");
    assert.deepEqual(
      unknown(old, b).map((u) => u.split(":")[0]),
      [
        "ServiceAccount stockade-system/stockade-operator",
        "ServiceAccount stockade-system/stockade-operator",
        "ServiceAccount stockade-system/stockade-operator",
        "Deployment stockade-system/stockade-operator",
        "Deployment stockade-system/stockade-operator",
        "Deployment other/stockade",
        "Namespace stockade",
        "Namespace stockade-operator",
        "ServiceAccount stockade-system/stockade-op",
      ],
    );
  });
});

type Policy = {
  kind?: string;
  metadata?: { name?: string };
  spec?: {
    dryRun?: boolean;
    paused?: boolean;
    nodeSelector?: { matchLabels?: Record<string, string>; matchExpressions?: unknown[] };
  };
};

describe("manifests/examples/ is safe to apply as it is", () => {
  const policies = examples.flatMap((f) =>
    (loadAllYaml(read(f)) as (Policy | null)[]).filter((o): o is Policy => o?.kind === "FencingPolicy").map((p) => ({ f, p })),
  );
  test("there is an example FencingPolicy", () => assert.ok(policies.length > 0));
  test("no example FencingPolicy is live for all nodes: each is a dry run over nodes labelled stockade.io/pilot", () => {
    for (const { f, p } of policies) {
      const sel = p.spec?.nodeSelector ?? {};
      const selectsAll = Object.keys(sel.matchLabels ?? {}).length === 0 && (sel.matchExpressions ?? []).length === 0;
      const live = p.spec?.dryRun !== true && p.spec?.paused !== true;
      assert.ok(!(live && selectsAll), `${f}: FencingPolicy ${p.metadata?.name} fences every node as applied`);
      assert.equal(p.spec?.dryRun, true, `${f}: FencingPolicy ${p.metadata?.name} is a dry run until edited`);
      assert.equal(
        sel.matchLabels?.["stockade.io/pilot"],
        "true",
        `${f}: FencingPolicy ${p.metadata?.name} selects only the pilot's nodes`,
      );
    }
  });
  test("40-fencingpolicy.yaml selects only the pilot's nodes and says how to go live", () => {
    const p = policies.find(({ f }) => f.endsWith("40-fencingpolicy.yaml"))?.p;
    assert.deepEqual(p?.spec?.nodeSelector, { matchLabels: { "stockade.io/pilot": "true" } });
    for (const f of ["manifests/examples/40-fencingpolicy.yaml", "docs/getting-started.md"]) {
      const text = read(f);
      assert.match(text, /kubectl label node <node> stockade\.io\/pilot=true/, f);
      assert.match(text, /dryRun: false/, f);
    }
  });
});

describe("docs/README.md and the runbook agree with the bundle", () => {
  const index = read("docs/README.md");
  test("the support matrix names the Kubernetes version the tests run (tools/k8s-bins/versions.env)", () => {
    const version = /^K8S_VERSION=(\S+)$/m.exec(read("tools/k8s-bins/versions.env"))?.[1];
    assert.ok(version);
    assert.match(index, new RegExp(`Tested: \\*\\*v${version.replaceAll(".", "\\.")}\\*\\*`));
    assert.match(index, /\*\*Minimum: Kubernetes 1\.30\.\*\*/);
  });
  test("the features the matrix says need 1.30 are the ones the bundle uses", () => {
    assert.match(read("manifests/06-admission-policy.yaml"), /^kind: ValidatingAdmissionPolicy$/m);
    assert.match(read("manifests/06-admission-policy.yaml"), /schedulingGates/);
    assert.match(read("manifests/08-webhooks.yaml"), /^ {4}matchConditions:$/m);
    assert.match(read("manifests/01-crds.yaml"), /x-kubernetes-validations:[\s\S]*messageExpression:/);
    for (const row of ["ValidatingAdmissionPolicy", "matchConditions", "spec.schedulingGates", "x-kubernetes-validations"])
      assert.ok(
        index.split("\n").some((l) => l.startsWith("|") && l.includes(row)),
        `the matrix has a row for ${row}`,
      );
  });
  test("every users' page of docs/ is listed in the index; the developers' pages in the developer guide, linked under For developers", () => {
    const [users, developers] = index.split("## For developers") as [string, string];
    for (const page of ["getting-started.md", "api.md", "safety.md", "operate.md", "troubleshooting.md", "upgrade.md"])
      assert.ok(users.includes(`](${page}`), page);
    for (const f of userPages.filter((d) => d.startsWith("docs/") && d !== "docs/README.md"))
      assert.ok(users.includes(`](${f.slice(5)}`), `${f} is not in docs/README.md`);
    assert.ok(developers.includes("](developer/README.md)"), "the index links the developer guide");
    assert.ok(!users.includes("](developer/"), "the users' part of the index does not send users to developers' pages");
    const guide = read("docs/developer/README.md");
    for (const page of ["lab.md", "image.md", "chaos.md", "scale.md", "ledger.md"]) assert.ok(guide.includes(`](${page})`), page);
    for (const f of developerPages.filter((d) => d !== "docs/developer/README.md"))
      assert.ok(guide.includes(`](${relative("docs/developer", f)}`), `${f} is not in docs/developer/README.md`);
  });
  test("the runbook's uninstall steps are manifests/README.md's", () => {
    const block = (md: string, after: string) => /```sh\n([\s\S]*?)```/.exec(md.slice(md.indexOf(after)))?.[1];
    const steps = block(read("manifests/README.md"), "**Uninstall**");
    assert.ok(steps?.includes("kubectl delete -f manifests/08-webhooks.yaml"));
    assert.equal(block(read("docs/operate.md"), "### Uninstall"), steps);
  });
  test("the README links the index", () => assert.match(read("README.md"), /\]\(docs\/README\.md\)/));
});

/** What a users' page must not mention: the source, the tests, the lab, the benchmarks (they live in docs/developer/). */
export function developerMentions(md: string): string[] {
  const out: string[] = [];
  for (const [i, line] of md.split("\n").entries()) {
    const hits = [
      ...line.matchAll(/(?<![\w./-])(?:src|lab|test|e2e|bench|tools)\/[\w./-]*/g),
      ...line.matchAll(/(?<![\w./-])[\w-]+\.test\.ts\b/g), // a test file named without its folder
      ...line.matchAll(/npm run (?:lab|chaos|bench:[\w-]+|test:[\w-]+)\b/g),
      ...line.matchAll(/\b(?:the|a|on the|our) lab\b|\blab's\b/gi),
    ];
    for (const m of hits) out.push(`line ${i + 1}: ${m[0]}`);
  }
  return out;
}

describe("users' pages do not cite the source, the tests or the lab", () => {
  test("the users' pages are every page outside docs/developer/ but the architecture", () => {
    for (const f of ["README.md", "docs/README.md", "docs/getting-started.md", "docs/troubleshooting.md", "docs/upgrade.md"])
      assert.ok(userPages.includes(f), f);
    for (const f of ["docs/developer/README.md", "docs/developer/lab.md", "docs/developer/scale.md", "docs/architecture.md"])
      assert.ok(developerPages.includes(f), f);
    for (const f of ["docs/lab.md", "docs/scale.md", "docs/chaos.md", "docs/image.md", "docs/ledger.md"])
      assert.ok(!existsSync(join(root, f)), `${f} belongs under docs/developer/`);
  });
  for (const file of userPages)
    test(file, () => {
      assert.deepEqual(developerMentions(read(file)), [], `${file} cites what only developers have`);
    });
  test("the check finds the source, the tests, the lab and the benchmarks, and not look-alikes", () => {
    const md = [
      "see `src/agents/run.ts`",
      "(test/unit/docs.test.ts)",
      "lab/bed.ts",
      "npm run lab -- up",
      "measured on the lab",
      "npm run bench:scale",
      "e2e/volumes.test.ts",
      "kubectl apply -f manifests/ and docs/developer/lab.md, latest/ and my-src/",
      "Tests: `decide-fleet.test.ts`",
      "a unit test fails, tests.ts, ./my.test.tsx",
    ].join("\n");
    assert.deepEqual(
      developerMentions(md).map((m) => m.split(": ")[0]),
      ["line 1", "line 2", "line 3", "line 4", "line 5", "line 6", "line 7", "line 9"],
    );
  });
});

describe("the README: short, and its two set-up commands are the project's", () => {
  const readme = read("README.md");
  test("README.md is at most 8 KiB", () => {
    const bytes = Buffer.byteLength(readme);
    assert.ok(bytes <= 8192, `README.md is ${bytes} bytes`);
  });
  /** The one-line ```sh blocks of the README, in order. */
  const oneLiners = [...readme.matchAll(/^```sh\n([^\n]+)\n```$/gm)].map((m) => m[1]!);
  test("the demo and the whole test suite, each one command, the demo first", () => {
    assert.deepEqual(oneLiners.slice(0, 1), ["npm run demo"]);
    assert.ok(oneLiners.includes("npm install && npm test"), oneLiners.join(" | "));
  });
  test("both commands run scripts of package.json, and CI runs the README's test command", () => {
    const scripts = (JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts;
    for (const command of ["npm run demo", "npm install && npm test"])
      for (const m of command.matchAll(/npm (?:run )?([\w:-]+)/g))
        if (m[1] !== "install") assert.ok(scripts[m[1]!], `package.json has no script ${m[1]} (README: ${command})`);
    assert.match(scripts.demo!, /demo\/run\.ts/);
    assert.match(scripts.test!, /node --test/);
    assert.match(read(".ci/run"), /^npm install && npm test\b/m);
  });
  test("the README links the users' index, getting started, and the developer guide", () => {
    for (const link of ["docs/README.md", "docs/getting-started.md", "docs/developer/README.md"])
      assert.ok(readme.includes(`](${link}`), link);
  });
  test("the README and getting started give the same kustomize overlay", () => {
    const overlay = (md: string) => /```yaml\n(apiVersion: kustomize[\s\S]*?)```/.exec(md)?.[1];
    assert.ok(overlay(readme)?.includes("images: [{ name: ghcr.io/stockade-io/stockade"));
    assert.equal(overlay(read("docs/getting-started.md")), overlay(readme));
  });
});

describe("docs/troubleshooting.md names the conditions and Events the operator really writes", () => {
  const source = (readdirSync(join(root, "src"), { recursive: true }) as string[])
    .filter((f) => f.endsWith(".ts"))
    .map((f) => read(`src/${f}`))
    .join("\n");
  const page = read("docs/troubleshooting.md");
  /** The `UpperCamelCase` names in the first column of the page's tables: the reasons and decisions it explains. */
  const documented = [
    ...new Set(
      page
        .split("\n")
        .filter((l) => l.startsWith("| ") && !l.startsWith("| -"))
        .flatMap((l) => [...l.split("|")[1]!.matchAll(/`([A-Z][A-Za-z]+)`/g)].map((m) => m[1]!)),
    ),
  ];
  test("every reason and decision the page explains is one the source writes", () => {
    assert.ok(documented.length >= 40, `${documented.length} names`);
    const unknown = documented.filter((r) => !source.includes(`"${r}"`));
    assert.deepEqual(unknown, [], "reasons in docs/troubleshooting.md that no code writes");
  });
  test("every Warning Event reason the source writes is explained on the page", () => {
    // "Warning", "Reason" and `ok ? "Normal" : "Warning", ok ? "Reason1" : "Reason2"`; the reasons carried in
    // variables are the FenceAgent's, the storm guard's and the waits below, which the first test covers.
    const warnings = new Set([...source.matchAll(/"Warning",\s*(?:\w+ \? "[A-Za-z]+" : )?"([A-Z][A-Za-z]+)"/g)].map((m) => m[1]!));
    for (const m of source.matchAll(/const WARNING_WAITS = new Set\(\[([^\]]*)\]/g))
      for (const r of m[1]!.matchAll(/"([A-Z][A-Za-z]+)"/g)) warnings.add(r[1]!);
    assert.ok(warnings.has("FenceFailed") && warnings.has("NoPolicy") && warnings.has("ForceDeleted"), [...warnings].join(", "));
    const missing = [...warnings].filter((r) => !page.includes(`\`${r}\``));
    assert.deepEqual(missing, [], "Warning Events the operator writes that docs/troubleshooting.md does not explain");
  });
});
