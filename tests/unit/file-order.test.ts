// The order the test files start in (tests/file-order.ts): the longest first, so that none begins last and
// keeps the run going alone; the microVM files in their lane's order.
import { describe, expect, it } from "vitest";
import { fileOrder, LONGEST_FIRST, MICROVM_FILES } from "../file-order.js";

const others = (n: number) => Array.from({ length: n }, (_, i) => `tests/integration/other-${i}.test.ts`);
const longest = LONGEST_FIRST.map(([file]) => file);
const microVm = MICROVM_FILES.map(([file]) => file);

describe("fileOrder", () => {
  it("keeps every file once", () => {
    const files = [...others(90), ...longest, ...microVm].reverse();
    expect([...fileOrder(files)].sort()).toEqual([...files].sort());
  });

  it("starts the longest known files first, longest first, and the rest in vitest's order", () => {
    const files = [...others(40), ...[...longest].reverse(), ...others(80).slice(40)];
    expect(fileOrder(files)).toEqual([...longest, ...others(80)]);
  });

  it("the tables are longest first", () => {
    const seconds = LONGEST_FIRST.map(([, s]) => s);
    expect([...seconds].sort((a, b) => b - a)).toEqual(seconds);
  });

  it("runs the microVM lane in its order, whatever vitest's", () => {
    expect(fileOrder([...microVm].reverse())).toEqual(microVm);
    expect(fileOrder(others(3))).toEqual(others(3));
  });
});
