import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Toleration } from "@kubernetes/client-node";
import { podWaitSeconds, UNREACHABLE_TAINT } from "../../src/decide/forgiveness.ts";
import { pod } from "./decide-fixtures.ts";

const unreachable = (tolerationSeconds?: number, effect: string | undefined = "NoExecute"): V1Toleration => ({
  key: UNREACHABLE_TAINT,
  operator: "Exists",
  effect,
  tolerationSeconds,
});
const withTolerations = (...tolerations: V1Toleration[]) => pod("db-0", { sts: true, tolerations });

describe("podWaitSeconds", () => {
  test("no toleration: the policy's fenceAfterSeconds, 10 by default", () => {
    assert.equal(podWaitSeconds(withTolerations(), undefined), 10);
    assert.equal(podWaitSeconds(withTolerations(), {}), 10);
    assert.equal(podWaitSeconds(withTolerations(), { fenceAfterSeconds: 15 }), 15);
    assert.equal(podWaitSeconds(pod("x"), { fenceAfterSeconds: 0 }), 0);
  });

  test("the unreachable toleration's tolerationSeconds wins over the policy (shorter or longer), down to minTolerationSeconds", () => {
    assert.equal(podWaitSeconds(withTolerations(unreachable(301)), { fenceAfterSeconds: 60 }), 301);
    assert.equal(podWaitSeconds(withTolerations(unreachable(45)), { fenceAfterSeconds: 60 }), 45);
    assert.equal(podWaitSeconds(withTolerations(unreachable(10)), { fenceAfterSeconds: 60, minTolerationSeconds: 5 }), 10);
  });

  test("item 11: a tenant's tolerationSeconds: 0 cannot get its node fenced sooner than minTolerationSeconds (default 30)", () => {
    assert.equal(podWaitSeconds(withTolerations(unreachable(0)), { fenceAfterSeconds: 60 }), 30);
    assert.equal(podWaitSeconds(withTolerations(unreachable(10)), { fenceAfterSeconds: 60 }), 30);
    assert.equal(podWaitSeconds(withTolerations(unreachable(0)), { fenceAfterSeconds: 60, minTolerationSeconds: 120 }), 120);
    // An administrator may allow it explicitly.
    assert.equal(podWaitSeconds(withTolerations(unreachable(0)), { minTolerationSeconds: 0 }), 0);
  });

  test("a negative tolerationSeconds means now, as the taint manager reads it: the floor applies", () => {
    assert.equal(podWaitSeconds(withTolerations(unreachable(-5)), undefined), 30);
    assert.equal(podWaitSeconds(withTolerations(unreachable(-5)), { minTolerationSeconds: 0 }), 0);
  });

  test("an unreachable toleration without tolerationSeconds tolerates forever: null", () => {
    assert.equal(podWaitSeconds(withTolerations(unreachable(undefined)), { fenceAfterSeconds: 60 }), null);
    const t = unreachable(undefined);
    (t as { tolerationSeconds: unknown }).tolerationSeconds = null; // as JSON null arrives
    assert.equal(podWaitSeconds(withTolerations(t), undefined), null);
  });

  test("an empty effect matches NoExecute too", () => {
    assert.equal(podWaitSeconds(withTolerations(unreachable(42, undefined)), undefined), 42);
    assert.equal(podWaitSeconds(withTolerations(unreachable(42, "")), undefined), 42);
  });

  test("a NoSchedule-only toleration does not count", () => {
    assert.equal(podWaitSeconds(withTolerations(unreachable(5, "NoSchedule")), { fenceAfterSeconds: 60 }), 60);
    assert.equal(podWaitSeconds(withTolerations(unreachable(undefined, "NoSchedule")), { fenceAfterSeconds: 60 }), 60);
  });

  test("other keys do not count", () => {
    const notReady: V1Toleration = { key: "node.kubernetes.io/not-ready", operator: "Exists", effect: "NoExecute", tolerationSeconds: 5 };
    assert.equal(podWaitSeconds(withTolerations(notReady), { fenceAfterSeconds: 60 }), 60);
  });

  test("a wildcard Exists toleration (no key) tolerates the partition forever", () => {
    assert.equal(podWaitSeconds(withTolerations({ operator: "Exists" }), { fenceAfterSeconds: 60 }), null);
    assert.equal(podWaitSeconds(withTolerations({ operator: "Exists", effect: "NoExecute" }), undefined), null);
  });

  test("a wildcard Exists toleration with tolerationSeconds gives that wait", () => {
    assert.equal(podWaitSeconds(withTolerations({ operator: "Exists", effect: "NoExecute", tolerationSeconds: 37 }), undefined), 37);
  });

  test("a wildcard restricted to NoSchedule does not count", () => {
    assert.equal(podWaitSeconds(withTolerations({ operator: "Exists", effect: "NoSchedule" }), { fenceAfterSeconds: 60 }), 60);
  });

  test("the first matching toleration counts, as in the taint manager's GetMatchingTolerations", () => {
    const pods = withTolerations(
      { key: "node.kubernetes.io/not-ready", operator: "Exists", effect: "NoExecute", tolerationSeconds: 31 },
      unreachable(120),
      unreachable(undefined),
    );
    assert.equal(podWaitSeconds(pods, undefined), 120);
    assert.equal(podWaitSeconds(withTolerations(unreachable(undefined), unreachable(120)), undefined), null);
  });

  test("the toleration Kubernetes injects into every pod (300 s, or the cluster's injectedTolerationSeconds) is not the author's word", () => {
    // kube-apiserver's DefaultTolerationSeconds admission plugin adds exactly this to a pod with none of its own.
    assert.equal(podWaitSeconds(withTolerations(unreachable(300)), undefined), 10);
    assert.equal(podWaitSeconds(withTolerations(unreachable(300)), { fenceAfterSeconds: 45 }), 45);
    // Anything else is written by someone: a different time, another effect spelling, a value, no operator.
    assert.equal(podWaitSeconds(withTolerations(unreachable(299)), undefined), 299);
    assert.equal(podWaitSeconds(withTolerations(unreachable(300, "")), undefined), 300);
    assert.equal(podWaitSeconds(withTolerations({ ...unreachable(300), operator: "Equal", value: "" }), undefined), 300);
    assert.equal(podWaitSeconds(withTolerations({ operator: "Exists", effect: "NoExecute", tolerationSeconds: 300 }), undefined), 300);
    // A cluster that injects another default says so; -1 takes every toleration as its author's.
    assert.equal(podWaitSeconds(withTolerations(unreachable(120)), { injectedTolerationSeconds: 120 }), 10);
    assert.equal(podWaitSeconds(withTolerations(unreachable(300)), { injectedTolerationSeconds: 120 }), 300);
    assert.equal(podWaitSeconds(withTolerations(unreachable(300)), { injectedTolerationSeconds: -1 }), 300);
  });

  test("honorPodTolerations: false ignores tolerations, even forever ones", () => {
    const off = { fenceAfterSeconds: 30, honorPodTolerations: false };
    assert.equal(podWaitSeconds(withTolerations(unreachable(300)), off), 30);
    assert.equal(podWaitSeconds(withTolerations(unreachable(undefined)), off), 30);
    assert.equal(podWaitSeconds(withTolerations({ operator: "Exists" }), off), 30);
    assert.equal(podWaitSeconds(withTolerations(), { honorPodTolerations: false }), 10);
  });
});
