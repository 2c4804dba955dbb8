// TEST DOUBLE — never shipped, used by bench/scale.ts only. A ClusterLabs-style fence agent that answers at once,
// for the scale lab's simulated nodes, which have no BMC (issue 12 allows one "clearly named as a test double"
// for the nodes beyond those given a real ipmi_sim). It speaks the real stdin contract the operator's fenceAgent
// driver uses (`-o metadata` prints resource-agent XML; otherwise "key=value" lines on stdin, action included;
// off/on exit 0, status exits 0 for on and 2 for off) and keeps each plug's power in a file of its own. The nodes
// it fences are already silent (lab/scale.ts silence()), so "off" only records what is already true.
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The executable's name: a fence_* name, as the operator requires, that says what it is. */
export const INSTANT_AGENT = "fence_test_double_instant";

const METADATA = `<?xml version="1.0" ?>
<resource-agent name="${INSTANT_AGENT}" shortdesc="Test double: answers at once, keeps power in files (Stockade's scale bench)">
<parameters>
	<parameter name="action" unique="0" required="1">
		<getopt mixed="-o, --action=[action]" />
		<content type="string" default="reboot" />
		<shortdesc lang="en">Fencing action</shortdesc>
	</parameter>
	<parameter name="plug" unique="0" required="1">
		<getopt mixed="-n, --plug=[id]" />
		<content type="string" />
		<shortdesc lang="en">Machine to fence</shortdesc>
	</parameter>
</parameters>
<actions>
	<action name="on" automatic="0"/>
	<action name="off" />
	<action name="status" />
	<action name="monitor" />
	<action name="metadata" />
</actions>
</resource-agent>`;

/** Writes the double into `binDir` (put it on the operator's PATH), its power files under `stateDir`; returns its path. */
export function installInstantAgent(binDir: string, stateDir: string): string {
  mkdirSync(binDir, { recursive: true });
  mkdirSync(stateDir, { recursive: true });
  const file = join(binDir, INSTANT_AGENT);
  const q = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  writeFileSync(
    file,
    `#!/bin/bash
# TEST DOUBLE written by lab/instant-agent.ts for bench/scale.ts: not a fence agent of any real machine.
state=${q(stateDir)}
if [ "$1" = "-o" ] && [ "$2" = "metadata" ]; then
  cat <<'XML'
${METADATA}
XML
  exit 0
fi
action=""; plug=""
while IFS= read -r line; do
  case "$line" in
    action=*) action="\${line#action=}" ;;
    plug=*) plug="\${line#plug=}" ;;
  esac
done
case "$plug" in
  "" | */* | .*) echo "plug missing or not a plain name" >&2; exit 1 ;;
esac
case "$action" in
  off) echo off > "$state/$plug" ;;
  on) echo on > "$state/$plug" ;;
  status | monitor) [ "$(cat "$state/$plug" 2>/dev/null)" = off ] && exit 2 ;;
  *) echo "unsupported action $action" >&2; exit 1 ;;
esac
exit 0
`,
  );
  chmodSync(file, 0o755);
  return file;
}
