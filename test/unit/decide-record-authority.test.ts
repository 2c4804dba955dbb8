// Issue 41 item 5 (decide/record-authority.ts): a node agent record is WatchdogExpired evidence only while the
// admission policy that limits each agent to its own node's record is in force, and only when its holder is the node
// agent's pod on that node. Without both, root on one node could write a silent peer's record as armed with D = T = 1.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { parseNodeAgentRecord } from "../../src/decide/node-agent-record.ts";
import {
  authorityRefusal,
  holderProblem,
  NODE_AGENT_DAEMONSET,
  RECORD_BINDING,
  RECORD_POLICY,
  recordPolicyProblems,
  type RecordAuthority,
} from "../../src/decide/record-authority.ts";
import { startDoubtWindow, watchdogEvidence } from "../../src/decide/watchdog-evidence.ts";
import { agentRecord } from "./decide-fixtures.ts";
import { shippedRecordPolicy } from "./record-authority-fixtures.ts";

const pod = (
  name: string,
  node: string | undefined,
  owner: { kind: string; name: string } | null = { kind: "DaemonSet", name: NODE_AGENT_DAEMONSET },
): V1Pod => ({
  metadata: {
    name,
    namespace: "stockade-node-agent",
    ...(owner ? { ownerReferences: [{ apiVersion: "apps/v1", kind: owner.kind, name: owner.name, uid: "u", controller: true }] } : {}),
  },
  spec: { ...(node ? { nodeName: node } : {}), containers: [] },
});

describe("decide/record-authority: the records' admission policy", () => {
  test("the shipped policy and binding are in force, and named as the code names them", () => {
    const { policy, binding } = shippedRecordPolicy();
    assert.equal(policy.metadata?.name, RECORD_POLICY);
    assert.equal(binding.metadata?.name, RECORD_BINDING);
    assert.deepEqual(recordPolicyProblems(policy, binding), []);
  });

  test("missing (or Kubernetes before 1.30, which serves no v1 policy): each says what is missing and how to install it", () => {
    const { policy, binding } = shippedRecordPolicy();
    for (const [p, b, what] of [
      [undefined, binding, `ValidatingAdmissionPolicy ${RECORD_POLICY} is not installed`],
      [policy, undefined, `ValidatingAdmissionPolicyBinding ${RECORD_BINDING} is not installed`],
    ] as const) {
      const problems = recordPolicyProblems(p, b);
      assert.equal(problems.length, 1);
      assert.ok(problems[0]!.startsWith(what), problems[0]);
      assert.match(problems[0]!, /kubectl apply -f manifests\/node-agent\/03-admission-policy\.yaml \(Kubernetes 1\.30 or newer\)/);
    }
  });

  test("weakened: every way of not enforcing is a problem", () => {
    const cases: [string, (x: ReturnType<typeof shippedRecordPolicy>) => void, RegExp][] = [
      ["Warn only", (x) => (x.binding.spec!.validationActions = ["Warn", "Audit"]), /validationActions \[Warn, Audit\] without Deny/],
      ["another policy bound", (x) => (x.binding.spec!.policyName = "other"), /binds policy "other"/],
      ["failurePolicy Ignore", (x) => (x.policy.spec!.failurePolicy = "Ignore"), /failurePolicy Ignore/],
      [
        "UPDATE not matched",
        (x) => (x.policy.spec!.matchConstraints!.resourceRules![0]!.operations = ["CREATE"]),
        /does not match UPDATE of leases/,
      ],
      [
        "another resource",
        (x) => (x.policy.spec!.matchConstraints!.resourceRules![0]!.resources = ["configmaps"]),
        /does not match CREATE of leases/,
      ],
      [
        // The older bundle's: it judged the agent's ServiceAccount alone, so any other holder of Lease rights in the
        // namespace (another DaemonSet's token) could write any node's record (fresh review of issue 41).
        "only the agent judged",
        (x) =>
          (x.policy.spec!.matchConditions = [
            {
              name: "the-node-agent",
              expression: 'request.userInfo.username == "system:serviceaccount:stockade-node-agent:stockade-node-agent"',
            },
          ]),
        /matchConditions: writers they leave out are not judged/,
      ],
      [
        "node check dropped",
        (x) => (x.policy.spec!.validations = [{ expression: "true" }]),
        /does not require the writer to be the node agent/,
      ],
      [
        "writer not checked",
        (x) =>
          (x.policy.spec!.validations = [
            { expression: 'request.userInfo.extra["authentication.kubernetes.io/node-name"][0] == object.metadata.name' },
          ]),
        /does not require the writer to be the node agent/,
      ],
      [
        "another namespace",
        (x) => (x.binding.spec!.matchResources!.namespaceSelector = { matchLabels: { "kubernetes.io/metadata.name": "elsewhere" } }),
        /namespaceSelector may not select namespace stockade-node-agent/,
      ],
      [
        "objects excluded",
        (x) => (x.binding.spec!.matchResources!.objectSelector = { matchLabels: { a: "b" } }),
        /narrows what the policy applies to/,
      ],
      [
        "type-check warnings",
        (x) => (x.policy.status = { typeChecking: { expressionWarnings: [{ fieldRef: "spec.validations[0]", warning: "no such key" }] } }),
        /type check warns at spec.validations\[0\]: no such key/,
      ],
    ];
    for (const [what, change, why] of cases) {
      const x = shippedRecordPolicy();
      change(x);
      const problems = recordPolicyProblems(x.policy, x.binding);
      assert.ok(
        problems.some((p) => why.test(p)),
        `${what}: ${JSON.stringify(problems)}`,
      );
    }
  });
});

describe("decide/record-authority: the record's holder", () => {
  test("the node agent's pod on that node vouches for the record", () => {
    assert.equal(holderProblem("n1", "stockade-node-agent-abcde", pod("stockade-node-agent-abcde", "n1")), undefined);
  });

  test("another node's agent pod, a pod of another DaemonSet, a bare pod, an unbound pod, no such pod, no holder: not evidence", () => {
    const cases: [string, string, V1Pod | undefined, RegExp][] = [
      ["another node's agent pod", "stockade-node-agent-zzzzz", pod("stockade-node-agent-zzzzz", "n2"), /runs on node n2, not on n1/],
      [
        "another DaemonSet",
        "cni-x",
        pod("cni-x", "n1", { kind: "DaemonSet", name: "cni" }),
        /not a pod of the DaemonSet stockade-node-agent/,
      ],
      ["a Deployment's pod", "rs-x", pod("rs-x", "n1", { kind: "ReplicaSet", name: "stockade-node-agent" }), /its controller: ReplicaSet/],
      ["a bare pod", "bare", pod("bare", "n1", null), /its controller: none/],
      ["not bound to a node", "stockade-node-agent-abcde", pod("stockade-node-agent-abcde", undefined), /runs on no node/],
      ["no such pod", "stockade-node-agent-gone", undefined, /no such pod exists in namespace stockade-node-agent/],
      ["no holder", "", undefined, /names no holder/],
    ];
    for (const [what, holder, p, why] of cases) assert.match(holderProblem("n1", holder, p) ?? "(none)", why, what);
  });
});

describe("WatchdogExpired refused while the record's authority is not in force", () => {
  const T0 = 1_000_000;
  const wall = "2026-01-01T00:00:10.000Z";
  const evidence = (authority: RecordAuthority | undefined) =>
    watchdogEvidence({
      node: "n1",
      // What a forged record says: armed, D = T = 1 (a wait of (1 + 1)·1.05 + 5 = 7.1 s).
      record: parseNodeAgentRecord(agentRecord("n1", { T: "1", D: "1", holder: "stockade-node-agent-abcde" })),
      authority,
      t0Ms: T0,
      t0Wall: wall,
      window: startDoubtWindow(T0, wall),
      nowMs: T0 + 7_100,
      kubeletSilentMs: 60_000,
      recordSilentMs: 60_000,
    });

  test("in force: the arithmetic decides (7.1 s)", () => {
    assert.equal(evidence({ policy: [] }).holds, true);
  });

  test("not checked, policy not in force, or a holder that is not the node's agent: refused, saying why", () => {
    const cases: [RecordAuthority | undefined, RegExp][] = [
      [undefined, /refused: the authority of node n1's agent record was not checked/],
      [
        { policy: recordPolicyProblems(undefined, undefined) },
        /refused while the admission policy stockade-node-agent-record is not in force: ValidatingAdmissionPolicy stockade-node-agent-record is not installed/,
      ],
      [{ policy: ["cannot check that ValidatingAdmissionPolicy stockade-node-agent-record is installed: timeout"] }, /cannot check/],
      [
        { policy: [], holder: holderProblem("n1", "stockade-node-agent-zzzzz", pod("stockade-node-agent-zzzzz", "n2")) },
        /refused: node n1's agent record's holder .* runs on node n2/,
      ],
    ];
    for (const [a, why] of cases) {
      const e = evidence(a);
      assert.equal(e.holds, false);
      assert.match((e as { reason: string }).reason, why);
      assert.match(authorityRefusal("n1", a) ?? "", /refused/);
    }
  });
});
