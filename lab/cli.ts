// npm run lab -- <command>: the lab for people (tests use the same operations through lab.ts).
import { parseArgs } from "node:util";
import { join } from "node:path";
import { repoRoot } from "./bins.ts";
import { Lab } from "./lab.ts";
import { KUBERNETES_NODE_LEASE_SECONDS, kubernetesTimings } from "./control-plane.ts";
import { realNodeImages } from "./images.ts";
import { readState, readEvents } from "./state.ts";
import { installNodeAgent } from "./node-agent-install.ts";
import { imageFromTar, installOperator, overlayRef, uninstallOperator } from "./operator-install.ts";

const usage = `usage: npm run lab -- <command>

  up [--nodes N] [--zones a,b] [--runtime kwok|real] [--kubernetes-timings]
                                 build what is missing, start a control plane and N nodes (default 3) with
                                 their BMCs, wait until every node is Ready, print how to reach them.
                                 kwok (default): simulated kubelets. real: a containerd and a kubelet per
                                 node in its own network namespace and cgroup (root; images imported, no pull).
                                 --kubernetes-timings: Kubernetes' defaults (node-monitor grace 50 s, 40 s
                                 Leases renewed every 10 s, 300 s default tolerations) instead of the lab's fast ones
  status                         components, nodes (API view and machine view) and BMCs
  crash <node>                   a hung machine, power on (kwok: kubelet killed; real: every process frozen)
  partition <node>               cut the node from the control plane: no heartbeats, workload keeps running
                                 (kwok: kubelet frozen; real: packets dropped, containers really run)
  partition-nodes <a> <b>        cut two real nodes from each other (both still reach the control plane)
  kill-kubelet <node>            a real node's kubelet dies, its containers keep running
  kill-agent <node>              a real node's node agent dies (its containers SIGKILLed, and again whenever
                                 they restart) until the node boots anew or heal: an armed watchdog fires
  disable-watchdog <node>        a real node's watchdog device goes for good: never armed, never a reset
  watchdog <node> [seconds]      a real node's watchdog (armed, last feed, timeout); seconds: set its timeout
  etcd cut|reconnect             partition kube-apiserver from etcd (an etcd proxy drops every byte)
  heal <node>                    undo a partition / restart a dead kubelet or agent (same boot ID), or reboot a hung one
  bmc <node> on|off|status       power control through the node's BMC over IPMI (ipmitool lanplus)
  bmc <node> unreachable|reachable   make the BMC stop/resume answering
  install [--image <tar>]        install the operator in-cluster as a user would (real nodes): import the image
                                 into every node's containerd, kubectl apply -k an overlay of manifests/ naming it,
                                 wait for both replicas Ready, the leader and the webhooks. --image: a tar made by
                                 docker save (default: build it from the Dockerfile, cached by its inputs)
  uninstall                      manifests/README.md's uninstall steps (unfence, NodeFences, webhooks, the bundle)
  install-node-agent [--image <tar>]  the node agent from manifests/node-agent/ (real nodes), with the lab's overlay:
                                 the lab watchdog through a hostPath (not privileged) and the fast timings
                                 c=2 N=2 F=6 D=12 peer timeout 1; waits for every node's record, armed
  events                         the lab's own event log (power changes, boots, faults)
  down                           stop every process the lab started

The lab lives in $STOCKADE_LAB_DIR (default: <repo>/.lab).`;

const dir = process.env.STOCKADE_LAB_DIR ?? join(repoRoot, ".lab");

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      nodes: { type: "string" },
      zones: { type: "string" },
      runtime: { type: "string" },
      "kubernetes-timings": { type: "boolean" },
      image: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const [cmd, node, action] = positionals;
  if (values.help || !cmd) {
    console.log(usage);
    return cmd || values.help ? 0 : 2;
  }
  const needNode = () => {
    if (!node) throw new UsageError(`${cmd} needs a node name`);
    return node;
  };
  switch (cmd) {
    case "up": {
      const nodes = values.nodes === undefined ? 3 : Number(values.nodes);
      const runtime = values.runtime ?? "kwok";
      if (runtime !== "kwok" && runtime !== "real") throw new UsageError(`--runtime must be kwok or real (got "${runtime}")`);
      const lab = await Lab.up({
        dir,
        nodes,
        runtime,
        ...(runtime === "real" ? { images: await realNodeImages((m: string) => console.error(`[lab] ${m}`)) } : {}),
        ...(values.zones ? { zones: values.zones.split(",") } : {}),
        ...(values["kubernetes-timings"] ? { timings: kubernetesTimings, nodeLeaseSeconds: KUBERNETES_NODE_LEASE_SECONDS } : {}),
        log: (m) => console.error(`[lab] ${m}`),
      });
      printAccess(lab);
      return 0;
    }
    case "status":
      await printStatus(Lab.attach(dir));
      return 0;
    case "crash":
    case "partition":
    case "heal": {
      const lab = Lab.attach(dir);
      await lab[cmd](needNode());
      console.log(`${node}: ${describe(lab.machine(node!))}`);
      return 0;
    }
    case "partition-nodes": {
      if (!node || !action) throw new UsageError("partition-nodes needs two node names");
      const lab = Lab.attach(dir);
      await lab.partitionNodes(node, action);
      console.log(`${node} and ${action} cut from each other`);
      return 0;
    }
    case "kill-kubelet": {
      const lab = Lab.attach(dir);
      await lab.killKubelet(needNode());
      console.log(`${node}: ${describe(lab.machine(node!))}`);
      return 0;
    }
    case "kill-agent": {
      const pids = await Lab.attach(dir).killNodeAgent(needNode());
      console.log(
        `${node}: node agent killed (${pids.length ? `pids ${pids.join(", ")}` : "none running now"}); kept dead until a new boot or heal`,
      );
      return 0;
    }
    case "disable-watchdog": {
      await Lab.attach(dir).disableWatchdog(needNode());
      console.log(`${node}: watchdog disabled (no device; it never resets the node)`);
      return 0;
    }
    case "watchdog": {
      const lab = Lab.attach(dir);
      if (action !== undefined) lab.setWatchdogTimeout(needNode(), Number(action));
      console.log(JSON.stringify({ node, ...lab.watchdog(needNode()) }));
      return 0;
    }
    case "etcd": {
      if (node !== "cut" && node !== "reconnect") throw new UsageError("etcd needs cut or reconnect");
      await Lab.attach(dir).partitionEtcd(node === "cut");
      console.log(`kube-apiserver ${node === "cut" ? "cut from" : "reconnected to"} etcd`);
      return 0;
    }
    case "bmc": {
      const lab = Lab.attach(dir);
      const n = needNode();
      if (action === "unreachable" || action === "reachable") {
        await lab.setBmcReachable(n, action === "reachable");
        console.log(`${n}: BMC ${action}`);
      } else if (action === "on" || action === "off" || action === "status") {
        console.log(`${n}: Chassis Power is ${await lab.bmc(n, action)}`);
      } else throw new UsageError(`bmc ${n} needs one of on, off, status, unreachable, reachable`);
      return 0;
    }
    case "install": {
      const lab = Lab.attach(dir);
      const log = (m: string) => console.error(`[lab] ${m}`);
      const done = await installOperator(lab, { image: values.image ? await imageFromTar(values.image) : undefined, log });
      console.log(
        `operator ${overlayRef(done.image)} installed (overlay ${done.overlay}): import ${(done.ms.import / 1000).toFixed(1)} s, apply ${(done.ms.apply / 1000).toFixed(1)} s, Ready ${(done.ms.ready / 1000).toFixed(1)} s`,
      );
      return 0;
    }
    case "install-node-agent": {
      const lab = Lab.attach(dir);
      const done = await installNodeAgent(lab, {
        image: values.image ? await imageFromTar(values.image) : undefined,
        log: (m) => console.error(`[lab] ${m}`),
      });
      console.log(
        `node agent ${overlayRef(done.image)} installed on ${lab.nodes().length} nodes (overlay ${done.overlay}), every watchdog armed`,
      );
      return 0;
    }
    case "uninstall":
      await uninstallOperator(Lab.attach(dir), { log: (m) => console.error(`[lab] ${m}`) });
      console.log("operator uninstalled");
      return 0;
    case "events":
      for (const e of readEvents(dir)) console.log(`${e.time}  ${e.kind.padEnd(9)} ${e.node ?? ""} ${JSON.stringify(e.detail)}`);
      return 0;
    case "down": {
      const had = await Lab.downDir(dir);
      console.log(had ? `lab in ${dir} stopped` : `no lab in ${dir}`);
      return 0;
    }
    default:
      throw new UsageError(`unknown command "${cmd}"`);
  }
}

class UsageError extends Error {}

function describe(m: ReturnType<Lab["machine"]>): string {
  return `power ${m.power}, kubelet ${m.kubelet}${m.pid ? ` (pid ${m.pid})` : ""}, bootID ${m.bootID ?? "-"}`;
}

function printAccess(lab: Lab): void {
  const s = lab.state;
  console.log(`\nexport KUBECONFIG=${lab.kubeconfig}`);
  console.log(`export PATH=${s.binDir}:$PATH    # the lab's kubectl ${s.binDir}/kubectl`);
  console.log(`\nBMCs (IPMI 2.0 lanplus, cipher suite 3):`);
  for (const n of s.nodes) {
    console.log(`  ${n.name.padEnd(8)} ${n.bmc.address}:${n.bmc.port}  user ${n.bmc.username}  password in ${n.bmc.passwordFile}`);
  }
  const first = s.nodes[0];
  if (first) {
    console.log(
      `\ntry: ipmitool -I lanplus -C 3 -H ${first.bmc.address} -p ${first.bmc.port} -U ${first.bmc.username} -f ${first.bmc.passwordFile} chassis power status`,
    );
  }
  console.log(`logs: ${join(s.dir, "logs")}    stop: npm run lab -- down`);
}

async function printStatus(lab: Lab): Promise<void> {
  const s = readState(lab.dir);
  console.log(`lab ${s.dir} (apiserver ${s.apiserverUrl})`);
  for (const [c, alive] of Object.entries(lab.componentStatus())) console.log(`  ${c.padEnd(24)} ${alive ? "running" : "STOPPED"}`);
  console.log("nodes:");
  for (const n of s.nodes) {
    let ready: string;
    try {
      ready = Lab.readyStatus(await lab.node(n.name)) ?? "-";
    } catch {
      ready = "(apiserver unreachable)";
    }
    const bmc = lab.bmcReachable(n.name) ? `${n.bmc.address}:${n.bmc.port}` : "UNREACHABLE";
    console.log(`  ${n.name.padEnd(8)} Ready=${ready.padEnd(8)} ${describe(lab.machine(n.name))}  BMC ${bmc}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => (process.exitCode = code),
  (e: Error) => {
    console.error(e instanceof UsageError ? `${e.message}\n\n${usage}` : `lab: ${e.message}`);
    process.exitCode = e instanceof UsageError ? 2 : 1;
  },
);
