// The V8 flags the operator runs under, wherever it runs: the image's ENTRYPOINT (Dockerfile), `npm start`, and
// the lab's operators (lab/bed.ts) say the same; test/unit/node-flags.test.ts holds them to it.
//
// --max-semi-space-size=16 (MiB): in a container V8 sizes its heap from the memory limit, and under the
// Deployment's 512Mi it gave the young generation 2 MiB. A fleet pass makes a few MiB of short-lived objects, so
// most of them were promoted to the old generation and died there: ~12 scavenges a second and a major collection
// every few seconds, pauses up to 300 ms, a third of the operator's CPU in a burst of 50 fences (issue 12,
// docs/developer/scale.md). With 16 MiB semi-spaces (32 MiB of young generation, ~35 MiB more RSS) the same churn under the
// same limit was collected 14× less often, in less than half the time (bench/cache-heap.ts --churn-seconds).
export const OPERATOR_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=16"];
