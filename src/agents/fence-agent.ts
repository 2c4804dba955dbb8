// Any ClusterLabs fence_* agent, through its stdin contract: "key=value" lines (action included), then EOF.
// Exit status is the answer: off/on 0 = done; status 0 = on, 2 = off, 1 = failure. Credentials only ever
// travel on stdin, and stdin is never quoted in a message.
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { AgentError, type AgentContext, type AgentDriver, type PowerState } from "./types.ts";
import { ChildAborted, runChild, type ChildResult } from "./child.ts";
import { excerpt, redact } from "./redact.ts";

export const AGENT_NAME = /^fence_[a-z0-9_]+$/;
/** Debian and RHEL install the agents in /usr/sbin, which is often not on a service's PATH. */
const SBIN_DIRS = ["/usr/sbin", "/sbin"];
const PARAM_KEY = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

// Python noise some distributions' agents print on every run.
const NOISE = [/DeprecationWarning/, /^from pipes import/];

function searchDirs(path = process.env.PATH ?? ""): string[] {
  return [...new Set([...path.split(delimiter).filter((d) => d.length > 0), ...SBIN_DIRS])];
}

/** The absolute path of agent `name` on PATH plus /usr/sbin and /sbin, or undefined. */
export function resolveAgent(name: string, path = process.env.PATH): string | undefined {
  if (!AGENT_NAME.test(name)) return undefined;
  for (const dir of searchDirs(path)) {
    const file = join(dir, name);
    try {
      if (!statSync(file).isFile()) continue;
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

function notInstalled(name: string): string {
  return `fence agent ${name} was not found on PATH, /usr/sbin or /sbin of the operator's host: install the fence-agents package (or the one providing ${name})`;
}

export class FenceAgentDriver implements AgentDriver {
  readonly type = "fenceAgent" as const;
  readonly agent: string;

  constructor(agent: string) {
    if (!AGENT_NAME.test(agent))
      throw new AgentError("Config", `agent "${agent}" is not a fence agent name: it must match ${AGENT_NAME.source}`);
    this.agent = agent;
  }

  validate(parameters: Record<string, string>): string[] {
    const problems: string[] = [];
    if (resolveAgent(this.agent) === undefined) problems.push(notInstalled(this.agent));
    for (const [k, v] of Object.entries(parameters)) {
      if (k === "action") problems.push("parameter action is set by Stockade for each operation: remove it");
      else if (!PARAM_KEY.test(k))
        problems.push(`parameter name "${k}" cannot be passed on a fence agent's stdin: use letters, digits, _ . -`);
      // A newline would end the line early and smuggle in another option.
      if (/[\r\n]/.test(v)) problems.push(`parameter ${k} contains a line break, which the fence agent stdin format cannot carry`);
    }
    return problems;
  }

  private async invoke(ctx: AgentContext, action: "off" | "on" | "status"): Promise<ChildResult> {
    const problems = this.validate(ctx.parameters);
    if (problems.length > 0) throw new AgentError("Config", redact(problems.join("; "), ctx.parameters));
    const file = resolveAgent(this.agent);
    if (file === undefined) throw new AgentError("Config", notInstalled(this.agent));
    const input = [`action=${action}`, ...Object.entries(ctx.parameters).map(([k, v]) => `${k}=${v}`), ""].join("\n");
    // The agents themselves run ipmitool & co. from sbin directories.
    const env = { ...process.env, PATH: searchDirs().join(delimiter) };
    try {
      return await runChild(file, [], { env, input, signal: ctx.signal });
    } catch (e) {
      if (e instanceof ChildAborted) throw new AgentError("TimedOut", `${this.agent} ${action} was killed at the deadline`);
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") throw new AgentError("Config", notInstalled(this.agent));
      throw new AgentError("Config", `could not run ${file}: ${(e as Error).message}`);
    }
  }

  private failure(ctx: AgentContext, action: string, r: ChildResult, expected: string): AgentError {
    const how = r.code === null ? `was killed by ${r.signal}` : `exited with ${r.code} (${expected})`;
    const detail = excerpt(r.stderr || r.stdout, 240, NOISE);
    const msg = redact(`${this.agent} ${action} ${how}: ${detail}`, ctx.parameters);
    const out = `${r.stderr}\n${r.stdout}`;
    // The fencing library's standard failure messages (fencing.py EC_*).
    let kind: AgentError["kind"] = "Failed";
    // status has a three-valued answer: any other exit code means we cannot tell what the agent saw.
    if (action === "status" && r.code !== null && r.code !== 1) kind = "BadOutput";
    else if (/Connection timed out|Connection lost/i.test(out)) kind = "Unreachable";
    else if (/does not have the correct privileges|Login failed|authentication failed/i.test(out)) kind = "AuthFailed";
    else if (/You have to set login password|Failed: Unrecognised action|required option/i.test(out)) kind = "Config";
    const hint = kind === "Failed" ? "; for details run the agent by hand with the same parameters plus verbose=1" : "";
    return new AgentError(kind, msg + hint);
  }

  async power(ctx: AgentContext, action: "off" | "on"): Promise<void> {
    const r = await this.invoke(ctx, action);
    if (r.code !== 0) throw this.failure(ctx, action, r, "expected 0 = success");
  }

  async status(ctx: AgentContext): Promise<PowerState> {
    const r = await this.invoke(ctx, "status");
    if (r.code === 0) return "on";
    if (r.code === 2) return "off";
    throw this.failure(ctx, "status", r, "expected 0 = on, 2 = off");
  }
}
