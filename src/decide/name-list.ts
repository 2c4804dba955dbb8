// Names in a status message, an Event or a log line: the first few, in the order given, then how many more. A
// message that listed every one grew with the cluster: a storm guard holding at 5,000 nodes named 4,393 of them
// (57 KB), every held node's decision carried it, and each pass that changed the count kept and logged a copy per
// node; that run's operator ran out of heap (docs/developer/scale.md, 2026-11-26 afternoon).
export const NAMES_SHOWN = 10;

export function nameList(names: readonly string[], max = NAMES_SHOWN): string {
  if (names.length <= max) return names.join(", ");
  return `${names.slice(0, max).join(", ")} and ${names.length - max} more`;
}
