import assert from "node:assert/strict";
import { test } from "node:test";
import { nameList } from "../../src/decide/name-list.ts";

test("nameList keeps the given order (a dry run's fencing order), names ten and counts the rest", () => {
  assert.equal(nameList(["node-c", "node-a", "node-b"]), "node-c, node-a, node-b");
  const many = Array.from({ length: 25 }, (_, i) => `node-${25 - i}`);
  assert.equal(nameList(many), "node-25, node-24, node-23, node-22, node-21, node-20, node-19, node-18, node-17, node-16 and 15 more");
  assert.equal(nameList([]), "");
});
