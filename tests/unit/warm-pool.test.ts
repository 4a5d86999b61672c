// The warm pool's arithmetic (runtime/tenants/pool.ts): its class, the target it aims at as claims stop,
// and what the host can hold. The pool itself runs in tests/integration/warm-pool.test.ts.
import { describe, expect, it } from "vitest";
import type { Database } from "../../runtime/store/db.js";
import { poolCapacityProblem, poolClass, WarmPool } from "../../runtime/tenants/pool.js";
import type { TenantDefaults } from "../../runtime/tenants/service.js";

const defaults = { image: "agent-sandbox/sandbox:abc" } as TenantDefaults;
/** The arithmetic runs no member (their readiness check is the integration test's). */
const runners = () => Promise.reject(new Error("a unit test has no sandbox"));

describe("warm pool", () => {
  it("aims at size while claims come, at idleSize once none came for idleMinutes", () => {
    let now = 1_000_000;
    const pool = new WarmPool({
      db: {} as Database,
      defaults,
      runners,
      settings: { size: 10, idleSize: 2, idleMinutes: 1 },
      now: () => now,
    });
    expect(pool.enabled).toBe(true);
    expect(pool.target()).toBe(10);
    now += 59_000;
    expect(pool.target()).toBe(10);
    now += 2_000;
    expect(pool.target()).toBe(2);
    const off = new WarmPool({
      db: {} as Database,
      defaults,
      runners,
      settings: { size: 0, idleSize: 0, idleMinutes: 1 },
    });
    expect(off.enabled).toBe(false);
  });

  it("a member's class follows the default image: another image is another class", () => {
    expect(poolClass(defaults)).toMatch(/^[0-9a-f]{16}$/);
    expect(poolClass(defaults)).toBe(poolClass({ image: "agent-sandbox/sandbox:abc" }));
    expect(poolClass(defaults)).not.toBe(poolClass({ image: "agent-sandbox/sandbox:def" }));
  });

  it("refuses a pool whose members' memory exceeds the host's, naming both", () => {
    expect(poolCapacityProblem({ size: 4, idleSize: 0, idleMinutes: 60 }, 8 * 1024 ** 3)).toBeUndefined();
    expect(poolCapacityProblem({ size: 9, idleSize: 0, idleMinutes: 60 }, 8 * 1024 ** 3)).toBe(
      "9 members of 1024 MiB each need 9216 MiB; this host has 8192 MiB",
    );
    // An operator's overcommit: limits up to that many times the memory; past it, said with the figure.
    expect(poolCapacityProblem({ size: 32, memoryOvercommit: 4 }, 8 * 1024 ** 3)).toBeUndefined();
    expect(poolCapacityProblem({ size: 33, memoryOvercommit: 4 }, 8 * 1024 ** 3)).toBe(
      "33 members of 1024 MiB each need 33792 MiB; this host has 8192 MiB (32768 MiB of limits with memoryOvercommit 4)",
    );
  });
});
