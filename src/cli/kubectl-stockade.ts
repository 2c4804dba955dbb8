// kubectl-stockade, the kubectl plugin: `kubectl stockade status|fence|unfence|explain|history|check`. kubectl finds
// it on PATH by its name and passes every argument after "stockade" through, so the plugin takes the
// connection flags (--kubeconfig, --context) itself, like kubectl does.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline/promises";
import { parseArgs } from "node:util";
import { DateTime } from "luxon";
import { check } from "./check.ts";
import { CliError, Cluster, loadKubeConfig } from "./cluster.ts";
import { dumpYaml } from "@kubernetes/client-node";
import { explainReport, renderExplain, gatherFleet } from "./explain.ts";
import { confirmOff, fence, unfence } from "./fence.ts";
import { gatherHistory, historyReport, renderHistory } from "./history.ts";
import { gatherStatus, renderStatus, statusReport } from "./status.ts";

const CONNECTION = `Connection flags (as for kubectl):
  --kubeconfig PATH   kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)
  --context NAME      kubeconfig context to use (default: the current context)
  -h, --help          show help`;

export const USAGE = `kubectl stockade: see and steer Stockade, the fencing operator.

Usage: kubectl stockade COMMAND [flags]     (or: kubectl-stockade COMMAND [flags])

Commands:
  status              partitioned and suspect nodes, NodeFences, pods with NodeDown, FencingPolicies
  fence NODE          ask the operator to fence NODE now (creates a Manual NodeFence: the machine is powered off)
  unfence NODE        ask the operator to unfence NODE (sets spec.unfence=true on its NodeFence)
  confirm NODE        for a manual FenceAgent: say NODE's machine is powered off (annotates its NodeFence)
  explain NODE        why the operator will or will not fence NODE, from its own decision code
  history NODE        every fence of NODE the operator kept: when, why, who asked, levels tried, outcome
  check               validate FencingPolicies and FenceAgents and query every covered node's power status (read-only)
  version             this plugin's version and the Node.js running it (contacts no cluster)

Run "kubectl stockade COMMAND --help" for a command's flags.

${CONNECTION}
`;

const HELP: Record<string, string> = {
  status: `Usage: kubectl stockade status [-o json|yaml] [flags]

Shows what needs attention now:
  NODES            nodes that are not healthy (Suspect: a heartbeat is late or Ready is not True; Partitioned:
                   no Lease renewal and no Ready heartbeat for the node's policy's heartbeatTimeoutSeconds, and
                   its own Lease expired or Ready=Unknown; only Ready=Unknown with waitForNodeController),
                   judged by the operator's own health code
  NODEFENCES       every NodeFence: phase, origin, escalation level (counted from 1, as in the operator's
                   messages: status.currentLevel + 1), evidence, age and its last agent attempt
  PODS WITH NodeDown  pods whose NodeDown condition is True, their node and since when
  FENCINGPOLICIES  Ready, StormGuard and DryRun conditions, partitioned nodes and fences in flight; the message
                   of every condition that needs attention is printed under the table
  -o json|yaml     the same as data: every node (healthy ones too), NodeFences, pods with NodeDown, policies

${CONNECTION}
`,
  fence: `Usage: kubectl stockade fence NODE [--reason TEXT] [--policy NAME] [--replace] [--dry-run] [--yes] [flags]

Creates NodeFence NODE with origin Manual: the operator powers the machine off through the policy's agents,
confirms it is off, then releases the node's guarded pods and volumes. The node does not have to be
partitioned: use this for a suspect node you want out, now.

Refuses when a NodeFence for NODE already exists and is active. One that ended (Failed or Unfenced) stays
until you pass --replace, which deletes it (waiting for the operator to remove it; its episode stays in
kubectl stockade history) and creates the new one.

Flags:
  --reason TEXT   why, for people (spec.reason; at most 1024 characters)
  --policy NAME   the FencingPolicy to fence with (default: the one whose nodeSelector matches the node;
                  refused when none does, since the operator would fail the NodeFence)
  --replace       delete an ended (Failed/Unfenced) NodeFence for NODE first, and wait until it is gone
  --dry-run       say what would happen (and what the policy's paused/dryRun mean for it); change nothing
  --yes           do not ask for confirmation (needed when stdin is not a terminal)

Asks for confirmation first, showing what it will do. A paused or dryRun FencingPolicy holds back only the
operator's automatic fences: a Manual NodeFence is executed anyway, and the prompt says so.

${CONNECTION}
`,
  unfence: `Usage: kubectl stockade unfence NODE [--yes] [flags]

Sets spec.unfence=true on NodeFence NODE: the operator powers the machine back on and removes the node's
stockade.io/fenced taint once it is back. The NodeFence stays, as the record of the episode (phase Unfenced).
Asks for confirmation first; --yes skips it (needed when stdin is not a terminal).

${CONNECTION}
`,
  explain: `Usage: kubectl stockade explain NODE [-o json|yaml] [flags]

Runs the operator's fleet decision (src/decide/fleet.ts) on one list of nodes, Leases, pods, claims,
PodDisruptionBudgets, FencingPolicies and NodeFences, and prints for NODE:
  the verdict (Healthy, NoPolicy, NothingToProtect, Tolerated, Waiting, Paused, Held, Queued, DryRun, Fence,
  HasFence) and why; its health (Ready, last heartbeat, partitioned since); the policy that selects it; its
  pods, which are guarded and why, and how long each waits before fencing; and the policy's storm guard holds.
The operator's own watch-staleness guard cannot be seen from here and is taken as satisfied.
  -o json|yaml    the verdict, why, the node's health, its policy and NodeFence as data (levels counted from 1)

${CONNECTION}
`,
  history: `Usage: kubectl stockade history NODE [-o json|yaml] [flags]

Prints NODE's fence episodes, newest first, from the FenceRecords the operator keeps (one per NodeFence, kept
after the NodeFence is deleted or replaced by the next fence, within the operator's retention: 20 per node and
400 days by default):
  STARTED, ENDED  when the fence started, and when and why the episode ended (UnfenceRequested, Rebooted,
                  NodeRecovered, Deleted); "-" while it lasts
  ORIGIN          who asked: Automatic (the operator, under a FencingPolicy) or Manual (a person or a tool)
  OUTCOME         Released, Failed, Cancelled, Unfenced or InProgress
  EVIDENCE        PowerOffConfirmed, ManualConfirmation, StorageFenced or WatchdogExpired
  LEVELS          the escalation levels tried, counted from 1, with each agent's outcome
  PODS, VOLUMES   guarded pods force-deleted; VolumeAttachments deleted and claim locks broken
  REASON          the NodeFence's reason (the trigger of an automatic fence)
NODE need not exist any more.
  -o json|yaml    every episode as data, with the agents' messages, the evidence and the policy

${CONNECTION}
`,
  check: `Usage: kubectl stockade check [--node NODE] [--timeout SECONDS] [flags]

Checks that fencing would work, without fencing anything:
  - every FencingPolicy's escalation names FenceAgents that exist;
  - every FenceAgent resolves its parameters and credentials (reading their Secrets) for every node its
    policies give it, as the operator checks it;
  - for each of those nodes (or only NODE), a live power STATUS query through the agent, with the agent's
    timeout and retries. Never off, never on. The query runs from this machine: it needs the agent's tools
    (ipmitool, the fence_* agent) and a route to the fencing devices.
Prints OK power=on/off or the error per agent and node; exits 1 if anything failed.

Flags:
  --node NODE         query only NODE's agents
  --timeout SECONDS   time limit per query, instead of each FenceAgent's timeoutSeconds

${CONNECTION}
`,
  confirm: `Usage: kubectl stockade confirm NODE [--yes] [flags]

For a FencingPolicy level with a manual FenceAgent: after you have powered NODE's machine off yourself, this
annotates NodeFence NODE stockade.io/confirmed-off=NODE, and the operator treats the machine as off and
releases its guarded pods and volumes. Needs the "confirm" verb on nodefences (ClusterRole
stockade-fence-confirmer); the admission policy accepts it only while NODE is partitioned.
Asks for confirmation first; --yes skips it (needed when stdin is not a terminal).

${CONNECTION}
`,
  version: `Usage: kubectl stockade version

Prints this plugin's version (the Stockade release it came with) and the Node.js running it. Contacts no cluster.
`,
};

/** The plugin's version: package.json's, one folder above src/ (a checkout) or dist/ (an installed package). */
export function pluginVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}

const OPTIONS = {
  kubeconfig: { type: "string" },
  context: { type: "string" },
  help: { type: "boolean", short: "h" },
  reason: { type: "string" },
  policy: { type: "string" },
  replace: { type: "boolean" },
  node: { type: "string" },
  timeout: { type: "string" },
  "dry-run": { type: "boolean" },
  output: { type: "string", short: "o" },
  yes: { type: "boolean", short: "y" },
} as const;

const COMMAND_FLAGS: Record<string, string[]> = {
  status: ["output"],
  fence: ["reason", "policy", "replace", "dry-run", "yes"],
  unfence: ["yes"],
  confirm: ["yes"],
  explain: ["output"],
  history: ["output"],
  check: ["node", "timeout"],
  version: [],
};
const TAKES_NODE = new Set(["fence", "unfence", "explain", "confirm", "history"]);
const GLOBAL_FLAGS = ["kubeconfig", "context", "help"];

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  /** Shows the question and reads the answer; undefined when there is no one to ask (stdin not a terminal). */
  ask?: (question: string) => Promise<string | undefined>;
}

async function askTerminal(question: string): Promise<string | undefined> {
  if (!process.stdin.isTTY) return undefined;
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await rl.question(question);
  } finally {
    rl.close();
  }
}

const stdio: Io = { out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s), ask: askTerminal };

/** Runs one command line; resolves to the exit status (0 ok, 1 failure, 2 usage error). */
export async function main(argv: string[], io: Io = stdio): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: true });
  } catch (err) {
    io.err(`error: ${(err as Error).message}\nRun "kubectl stockade --help" for usage.\n`);
    return 2;
  }
  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (!command) {
    if (values.help) {
      io.out(USAGE);
      return 0;
    }
    io.err(USAGE);
    return 2;
  }
  const help = HELP[command];
  const allowed = COMMAND_FLAGS[command];
  if (!help || !allowed) {
    io.err(`error: unknown command "${command}"\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    io.out(help);
    return 0;
  }
  const usage = (msg: string) => {
    io.err(`error: ${msg}\n\n${help}`);
    return 2;
  };
  const extra = Object.keys(values).filter((k) => !GLOBAL_FLAGS.includes(k) && !allowed.includes(k));
  if (extra.length) return usage(`${command} does not take ${extra.map((k) => `--${k}`).join(", ")}`);
  const wantArgs = TAKES_NODE.has(command) ? 1 : 0;
  if (rest.length !== wantArgs)
    return usage(wantArgs ? `${command} takes exactly one NODE` : `${command} takes no arguments (got ${rest.join(" ")})`);
  const node = rest[0] ?? "";
  let timeoutSeconds: number | undefined;
  if (values.timeout !== undefined) {
    timeoutSeconds = Number(values.timeout);
    if (!/^\d+$/.test(values.timeout) || timeoutSeconds < 1 || timeoutSeconds > 600)
      return usage(`--timeout must be a whole number of seconds from 1 to 600, not "${values.timeout}"`);
  }
  const output = values.output;
  if (output !== undefined && output !== "json" && output !== "yaml") return usage(`-o must be json or yaml, not "${output}"`);
  const emit = (data: Record<string, unknown>) => io.out(output === "json" ? `${JSON.stringify(data, null, 2)}\n` : dumpYaml(data));

  if (command === "version") {
    io.out(`kubectl-stockade ${pluginVersion()} (Node.js ${process.versions.node})\n`);
    return 0;
  }

  // Asks before fence/unfence/confirm change anything, unless --yes.
  const confirm = async (plan: string): Promise<boolean> => {
    if (values.yes) return true;
    const answer = await (io.ask ?? askTerminal)(`${plan}Proceed? Type "yes": `);
    if (answer === undefined)
      throw new CliError(
        `stdin is not a terminal, so there is no one to confirm ${command} ${node}: pass --yes to ${command} without the prompt`,
        2,
      );
    return answer.trim().toLowerCase() === "yes";
  };

  try {
    const cluster = new Cluster(loadKubeConfig({ kubeconfig: values.kubeconfig, context: values.context }));
    const now = DateTime.now();
    switch (command) {
      case "status":
        if (output) emit(statusReport(await gatherStatus(cluster, now)));
        else io.out(renderStatus(await gatherStatus(cluster, now)));
        return 0;
      case "explain":
        await cluster.node(node);
        if (output) emit(explainReport(await gatherFleet(cluster, now), node));
        else io.out(renderExplain(await gatherFleet(cluster, now), node));
        return 0;
      case "history":
        if (output) emit(historyReport(await gatherHistory(cluster, node, now)));
        else io.out(renderHistory(await gatherHistory(cluster, node, now)));
        return 0;
      case "fence":
        io.out(
          await fence(
            cluster,
            node,
            { reason: values.reason, policy: values.policy, replace: values.replace, dryRun: values["dry-run"], confirm },
            now,
          ),
        );
        return 0;
      case "unfence":
        io.out(await unfence(cluster, node, confirm));
        return 0;
      case "confirm":
        io.out(await confirmOff(cluster, node, confirm));
        return 0;
      case "check":
        return (await check(cluster, { node: values.node, timeoutSeconds }, io.out)) ? 0 : 1;
    }
    return 2;
  } catch (err) {
    if (err instanceof CliError) {
      io.err(`error: ${err.message}\n`);
      return err.code;
    }
    throw err;
  }
}
