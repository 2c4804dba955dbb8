// The names of Stockade's two webhook configurations (manifests/08-webhooks.yaml): the TLS keeper
// (admission/tls-keeper.ts) writes their caBundle, `kubectl stockade check` (cli/cluster.ts) reads them. Here, below
// both, because the CLI is a client of the cluster and never imports the webhooks.
export const MUTATING_WEBHOOK = "stockade-claim-lock";
export const VALIDATING_WEBHOOK = "stockade-force-delete";
