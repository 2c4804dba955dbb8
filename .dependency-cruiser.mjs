// The layers Stockade is built in, as rules `npm run lint` holds (docs/developer/README.md, "Layers"). Written from
// the architecture, not from the imports of the day: a rule that fails means the code moved away from it.
//
//   api/ (the CRD types)  <-  decide/ (pure decisions)  <-  agents/, kube/, runtime/ (drivers and plumbing)
//     <-  controllers/ (carry the decisions out), admission/ (webhooks), cli/ (kubectl plugin)  <-  operator.ts (+ operator/), main.ts
//
// lab/, test/, e2e/, bench/, tools/ and demo/ sit beside src/ and may import it; src/ never imports them.

/** The operator's assembly (operator.ts and its parts in operator/) and the process entry. */
const TOP = "^src/((operator|main)[.]ts$|operator/)";
const NOT_SRC = "^(lab|test|e2e|bench|tools|demo)/";

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment:
        "A cycle makes two modules one: neither can be read, tested or moved without the other, and the import order " +
        "decides which sees the other's exports undefined at load time. Move the shared part down to where both can import it.",
      from: {},
      to: { circular: true },
    },
    {
      name: "decide-is-pure",
      severity: "error",
      comment:
        "decide/ is the state machine: pure functions of what was observed, tested without a cluster, a clock or a " +
        "machine. It sits at the bottom with api/: what it needs from agents/ (rules, driver facts) is passed in as data " +
        "or lives in decide/. Anything that runs things (drivers, steps, I/O modules such as fs, net, child_process, " +
        "http) belongs in the layers above. node:util and node:crypto are pure and allowed.",
      from: { path: "^src/decide/" },
      to: { pathNot: ["^src/(api|decide)/", "^node_modules/", "^(node:)?(util|crypto)$"] },
    },
    {
      name: "api-is-a-leaf",
      severity: "error",
      comment: "api/ is the CRDs' types, generated from crds/ (tools/gen-api-types.ts): everything may use it, it uses nothing of ours.",
      from: { path: "^src/api/" },
      to: { path: "^src/", pathNot: "^src/api/" },
    },
    {
      name: "plumbing-not-up",
      severity: "error",
      comment:
        "agents/, kube/ and runtime/ are the tools the controllers use (drivers, API access, loops): they know nothing " +
        "of who uses them, so a driver or a cache can be tested and reused alone and never reaches into a controller.",
      from: { path: "^src/(agents|kube|runtime)/" },
      to: { path: ["^src/(controllers|admission|cli)/", TOP] },
    },
    {
      name: "controllers-not-sideways",
      severity: "error",
      comment:
        "A controller carries out decisions with the tools below it; the webhooks, the CLI and the operator's " +
        "assembly are its peers or its caller. What a controller shares with them moves down (decide/, kube/).",
      from: { path: "^src/controllers/" },
      to: { path: ["^src/(admission|cli)/", TOP] },
    },
    {
      name: "admission-not-sideways",
      severity: "error",
      comment:
        "The webhooks answer the API server on their own and must not depend on a controller's state: what both need " +
        "(the claim lock's rules, annotations) lives in decide/ or kube/.",
      from: { path: "^src/admission/" },
      to: { path: ["^src/(controllers|cli)/", TOP] },
    },
    {
      name: "cli-is-a-client",
      severity: "error",
      comment:
        "The kubectl plugin runs on a user's machine against the cluster's API: it shares decisions and names with the " +
        "operator (decide/, api/, kube/, agents/), never the operator's controllers, webhooks or assembly.",
      from: { path: "^src/cli/" },
      to: { path: ["^src/(controllers|admission)/", TOP] },
    },
    {
      name: "src-not-harness",
      severity: "error",
      comment:
        "The operator ships alone (package.json files, the image): it never imports the lab, the tests, the benches, the " +
        "tools or the demo, which are not in it.",
      from: { path: "^src/" },
      to: { path: NOT_SRC },
    },
    {
      name: "lab-not-tests",
      severity: "error",
      comment: "The lab is the room the tests run in; the tests use it, not the other way round (bench/ and demo/ use the lab too).",
      from: { path: "^lab/" },
      to: { path: "^(test|e2e)/" },
    },
    {
      name: "src-no-dev-dependencies",
      severity: "error",
      comment:
        "The shipped operator installs dependencies only (npm ci --omit=dev in the image): a devDependency in src/ is missing in production.",
      from: { path: "^src/" },
      to: { dependencyTypes: ["npm-dev"], dependencyTypesNot: ["type-only"] },
    },
    {
      name: "not-to-unresolvable",
      severity: "error",
      comment: "An import that resolves to no file fails at run time; find it here rather than in the cluster.",
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(dist|[.]lab)/" },
    // Type-only imports are dependencies of the design too (a decide/ module naming an agents/ type depends on it).
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    // Packages are where node_modules/ says, not where a link there points (test/unit/layers.test.ts links it).
    preserveSymlinks: true,
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      mainFields: ["module", "main", "types", "typings"],
    },
  },
};
