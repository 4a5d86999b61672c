// Integration files run side by side (vitest.config.ts), so no two may share what the host allocates for
// them: each file's subnets (its tenants' pool, or the networks it makes itself) and SSH port ranges are
// its own. Two files with overlapping pools would take each other's networks (and `clearKilledRuns`
// removes whatever sits in a file's pool as a killed run's); two with overlapping ports would fail each
// other's creates. Read from the files' own literals: every IPv4 CIDR, every `[low, high]` pair of ports
// in the 27000-29999 band the suite's sandboxes use and every `sshHostPort` there (tests/unit, under mocks,
// allocates nothing).
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { parseCidr } from "../../lib/ipv4.js";
import { cidrsOverlap } from "../../lib/subnets.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

// The files `npm test` runs (the benchmarks run on their own, `npm run bench`, never beside them).
const DIRS = ["tests/integration", "tests/chaos", "tests/security"];

interface Claims {
  readonly file: string;
  readonly cidrs: string[];
  readonly ports: [number, number][];
}

function claimsOf(file: string): Claims {
  const text = readFileSync(path.join(REPO_ROOT, file), "utf8");
  const cidrs = [...text.matchAll(/"(\d+\.\d+\.\d+\.\d+\/\d+)"/g)].map((m) => m[1]!);
  const ports = [
    ...[...text.matchAll(/\[\s*(2[7-9]\d{3})\s*,\s*(2[7-9]\d{3})\s*\]/g)].map(
      (m) => [Number(m[1]), Number(m[2])] as [number, number],
    ),
    // A tenant spec's own port, outside any range.
    ...[...text.matchAll(/sshHostPort: (2[7-9]\d{3})\b/g)].map(
      (m) => [Number(m[1]), Number(m[1])] as [number, number],
    ),
  ];
  return { file, cidrs: [...new Set(cidrs)], ports };
}

/** Every pair of different files whose subnets or port ranges overlap, one line each. */
export function overlaps(all: readonly Claims[]): string[] {
  const found: string[] = [];
  for (const [i, a] of all.entries())
    for (const b of all.slice(i + 1)) {
      for (const x of a.cidrs)
        for (const y of b.cidrs) {
          const [cx, cy] = [parseCidr(x), parseCidr(y)];
          if (cx && cy && cidrsOverlap(cx, cy)) found.push(`${a.file} ${x} overlaps ${b.file} ${y}`);
        }
      for (const [lowA, highA] of a.ports)
        for (const [lowB, highB] of b.ports)
          if (lowA <= highB && lowB <= highA)
            found.push(`${a.file} ports ${lowA}-${highA} overlap ${b.file} ports ${lowB}-${highB}`);
    }
  return found;
}

const files = DIRS.flatMap((dir) =>
  readdirSync(path.join(REPO_ROOT, dir))
    .filter((name) => name.endsWith(".ts"))
    .map((name) => `${dir}/${name}`),
);

describe("the integration files' own subnets and SSH ports", () => {
  it("no two files share a subnet or a port", () => {
    expect(overlaps(files.map(claimsOf))).toEqual([]);
  });

  it("the check sees an overlap of subnets and of ports", () => {
    expect(
      overlaps([
        { file: "a", cidrs: ["10.239.0.0/22"], ports: [[27400, 27440]] },
        { file: "b", cidrs: ["10.239.2.0/24"], ports: [[27440, 27450]] },
        { file: "c", cidrs: ["10.240.0.0/24"], ports: [[27451, 27460]] },
      ]),
    ).toEqual([
      "a 10.239.0.0/22 overlaps b 10.239.2.0/24",
      "a ports 27400-27440 overlap b ports 27440-27450",
    ]);
  });
});
