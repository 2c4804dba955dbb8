// The scale lab's kwok process (lab/scale.ts), as the lab's teardown knows it: where its reference is kept and how
// it is stopped. Apart from scale.ts so that lab.ts stops it without importing the scale lab, which uses the Lab.
import { join } from "node:path";
import { readRef, stop } from "./processes.ts";
import { paths } from "./state.ts";

export const scaleKwokPidFile = (dir: string) => join(paths(dir).pids, "scale-kwok.json");

export async function stopScaleKwok(dir: string): Promise<void> {
  await stop(readRef(scaleKwokPidFile(dir)), 0);
}
