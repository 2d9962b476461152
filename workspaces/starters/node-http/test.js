const test = require("node:test");
const assert = require("node:assert");
const { greeting } = require("./server");

test("it greets by name", () => {
  assert.strictEqual(greeting("Ada"), "Hello, Ada!");
});

test("it greets the world by default", () => {
  assert.strictEqual(greeting(""), "Hello, world!");
});
