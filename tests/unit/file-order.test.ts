// The order the side-by-side files start in (tests/file-order.ts): the microVM files are one chain that takes
// turns, spread so that none of them waits for its turn on a worker that other files could use.
import { describe, expect, it } from "vitest";
import { fileOrder, LONGEST_FIRST, MICROVM_FILES, OTHER_FILE_SECONDS } from "../file-order.js";

const [first, second, third] = MICROVM_FILES.map(([file]) => file);
const others = (n: number) => Array.from({ length: n }, (_, i) => `tests/integration/other-${i}.test.ts`);

describe("fileOrder", () => {
  it("keeps every file once", () => {
    const files = [...others(90), ...LONGEST_FIRST.map(([file]) => file), third!, second!, first!];
    const order = fileOrder(files, 3);
    expect([...order].sort()).toEqual([...files].sort());
  });

  it("starts the first microVM file at once, then the longest others, longest first", () => {
    const files = [...others(90), ...LONGEST_FIRST.map(([file]) => file).reverse(), third!, second!, first!];
    const order = fileOrder(files, 3);
    expect(order[0]).toBe(first);
    expect(order.slice(1, 1 + LONGEST_FIRST.length)).toEqual(LONGEST_FIRST.map(([file]) => file));
  });

  it("places each later microVM file where the files before it keep the other workers busy until its turn", () => {
    const files = [first!, second!, third!, ...LONGEST_FIRST.map(([file]) => file), ...others(120)];
    for (const workers of [2, 3, 4]) {
      const order = fileOrder(files, workers);
      const seconds = new Map([...MICROVM_FILES, ...LONGEST_FIRST]);
      // The other files' time before each microVM file, spread over the workers beside the chain.
      const besideBefore = (file: string) =>
        order
          .slice(0, order.indexOf(file))
          .filter((f) => !MICROVM_FILES.some(([m]) => m === f))
          .reduce((sum, f) => sum + (seconds.get(f) ?? OTHER_FILE_SECONDS), 0) /
        (workers - 1);
      const firstEnds = seconds.get(first!)!;
      const secondEnds = firstEnds + seconds.get(second!)!;
      expect(besideBefore(second!)).toBeGreaterThanOrEqual(firstEnds);
      expect(besideBefore(third!)).toBeGreaterThanOrEqual(secondEnds);
      // ...and no later than one more file's worth: the chain does not stand still.
      expect(besideBefore(second!)).toBeLessThan(firstEnds + seconds.get(LONGEST_FIRST[0]![0])!);
      expect(besideBefore(third!)).toBeLessThan(secondEnds + seconds.get(LONGEST_FIRST[0]![0])!);
    }
  });

  it("puts the chain's rest at the end when the other files run out before it; with one worker, first", () => {
    const short = [first!, second!, third!, ...others(3)];
    expect(fileOrder(short, 3)).toEqual([first, ...others(3), second, third]);
    expect(fileOrder(short, 1)).toEqual([first, second, third, ...others(3)]);
    expect(fileOrder(others(3), 3)).toEqual(others(3));
  });
});
