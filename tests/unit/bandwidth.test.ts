// Bandwidth caps (issue 45): the tc commands the shaper runs, what it reads back from tc's JSON, the API's
// and the spec's rules, and each backend's admission of them.
import { describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import {
  burstBytes,
  ifbDevice,
  missingCaps,
  redirectsTo,
  rootTbfKbps,
  shapingCommands,
  TrafficShaperInputs,
} from "../../provider/resources/traffic-shaper.js";
import { CreateProjectBody } from "../../runtime/api/projects/schemas.js";
import { PatchProjectBody, settingsChange } from "../../runtime/api/projects/settings.js";
import { bandwidthRefused, platformBackends } from "../../runtime/backends/registry.js";
import { TenantRequestError, type TenantDefaults } from "../../runtime/tenants/service.js";

const BRIDGE = "sbx-0123456789a";
const shell = (t: Parameters<typeof shapingCommands>[0]) =>
  shapingCommands(t).map(({ argv, mayFail }) => `${argv.join(" ")}${mayFail ? "  # may fail" : ""}`);

describe("the shaper's tc commands", () => {
  it("a download cap is a TBF at the bridge's root; an upload cap the ingress redirected to its IFB's TBF", () => {
    expect(shell({ bridge: BRIDGE, downloadKbps: 8000, uploadKbps: 4000 })).toEqual([
      "tc qdisc replace dev sbx-0123456789a root handle 1: tbf rate 8000kbit burst 40000 latency 100ms",
      "ip link add sbi-0123456789a type ifb  # may fail",
      "ip link set sbi-0123456789a up",
      "tc qdisc replace dev sbi-0123456789a root handle 1: tbf rate 4000kbit burst 32768 latency 100ms",
      "tc qdisc del dev sbx-0123456789a ingress  # may fail",
      "tc qdisc add dev sbx-0123456789a handle ffff: ingress",
      "tc filter add dev sbx-0123456789a parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress redirect dev sbi-0123456789a",
    ]);
  });

  it("an absent cap removes what shaped it, and only that may fail (it may not be there)", () => {
    expect(shell({ bridge: BRIDGE })).toEqual([
      "tc qdisc del dev sbx-0123456789a root  # may fail",
      "tc qdisc del dev sbx-0123456789a ingress  # may fail",
      "ip link del sbi-0123456789a  # may fail",
    ]);
    expect(shell({ bridge: BRIDGE, uploadKbps: 64 })[0]).toBe(
      "tc qdisc del dev sbx-0123456789a root  # may fail",
    );
  });

  it("the bucket is 40 ms of the rate, at least 32 KiB", () => {
    expect([64, 6553, 6554, 8000, 10_000_000].map(burstBytes)).toEqual([
      32_768, 32_768, 32_770, 40_000, 50_000_000,
    ]);
  });

  it("the IFB device is the bridge's suffix under sbi-, a Linux name (≤ 15)", () => {
    expect(ifbDevice(BRIDGE)).toBe("sbi-0123456789a");
    expect(ifbDevice("br-abcdefghijklmn")).toBe("sbi-br-abcdefgh");
    expect(ifbDevice("br-abcdefghijklmn")).toHaveLength(15);
  });
});

describe("what the shaper reads back from tc", () => {
  // As `tc -j` 6.1 prints them (a TBF's rate in bytes a second).
  const qdiscs = [
    {
      kind: "tbf",
      handle: "1:",
      root: true,
      refcnt: 3,
      options: { rate: 1_000_000, burst: 40000, lat: 100000 },
    },
    { kind: "ingress", handle: "ffff:", parent: "ffff:fff1", options: {} },
  ];
  const filters = [
    { protocol: "all", pref: 1, kind: "u32", chain: 0 },
    {
      protocol: "all",
      kind: "u32",
      options: {
        fh: "800::800",
        actions: [
          {
            order: 1,
            kind: "mirred",
            mirred_action: "redirect",
            direction: "egress",
            to_dev: "sbi-0123456789a",
          },
        ],
      },
    },
  ];

  it("the root TBF's rate in kbit/s; none for the default qdisc or another's root", () => {
    expect(rootTbfKbps(qdiscs)).toBe(8000);
    expect(rootTbfKbps([{ kind: "noqueue", handle: "0:", root: true, options: {} }])).toBeUndefined();
    expect(rootTbfKbps([{ kind: "htb", handle: "1:", root: true, options: {} }])).toBeUndefined();
    expect(rootTbfKbps([])).toBeUndefined();
  });

  it("the ingress redirect counts only when it is to the bridge's own IFB", () => {
    expect(redirectsTo(filters, "sbi-0123456789a")).toBe(true);
    expect(redirectsTo(filters, "sbi-other")).toBe(false);
    expect(redirectsTo([], "sbi-0123456789a")).toBe(false);
  });

  it("a declared cap tc does not hold (removed, or another rate) is missing: drift", () => {
    const declared = { bridge: BRIDGE, downloadKbps: 8000, uploadKbps: 4000 };
    expect(missingCaps(declared, { downloadKbps: 8000, uploadKbps: 4000 })).toEqual([]);
    expect(missingCaps(declared, { uploadKbps: 4000 })).toEqual([
      "download cap 8000 kbit/s on sbx-0123456789a",
    ]);
    expect(missingCaps(declared, { downloadKbps: 9000 })).toEqual([
      "download cap 8000 kbit/s on sbx-0123456789a",
      "upload cap 4000 kbit/s on sbi-0123456789a",
    ]);
    // An undeclared direction is not checked: a qdisc of the operator's there is not the tenant's drift.
    expect(
      missingCaps({ bridge: BRIDGE, downloadKbps: 8000 }, { downloadKbps: 8000, uploadKbps: 1 }),
    ).toEqual([]);
  });
});

describe("the rules of a cap", () => {
  it("the resource takes 64 kbit/s to 10 Gbit/s, whole numbers, and a Linux bridge name", () => {
    const parse = (extra: object) =>
      TrafficShaperInputs.safeParse({ tenantId: "t1", bridge: BRIDGE, ...extra }).success;
    expect([64, 10_000_000].map((downloadKbps) => parse({ downloadKbps }))).toEqual([true, true]);
    expect([63, 10_000_001, 8000.5].map((uploadKbps) => parse({ uploadKbps }))).toEqual([
      false,
      false,
      false,
    ]);
    expect(parse({ bridge: "sbx-0123456789abc" })).toBe(false);
    expect(parse({ bridge: "a b" })).toBe(false);
  });

  it("PATCH: replaces the caps, null removes them, {} is refused naming the field", () => {
    expect(settingsChange(PatchProjectBody.parse({ bandwidth: { download_kbps: 8000 } }))).toEqual({
      bandwidth: { downloadKbps: 8000 },
    });
    expect(settingsChange(PatchProjectBody.parse({ bandwidth: null }))).toEqual({ bandwidth: null });
    const fields = (body: object) =>
      PatchProjectBody.safeParse(body).error?.issues.map((issue) => issue.path.join("."));
    expect(fields({ bandwidth: {} })).toEqual(["bandwidth"]);
    expect(fields({ bandwidth: { download_kbps: 10 } })).toEqual(["bandwidth.download_kbps"]);
    expect(fields({ bandwidth: { upload_kbps: 2e7 } })).toEqual(["bandwidth.upload_kbps"]);
    expect(fields({ bandwidth: { rate_mbps: 8 } })).toContain("bandwidth");
  });

  it("a create takes caps for a container alone (400 naming the field with another backend)", () => {
    expect(CreateProjectBody.safeParse({ name: "p", bandwidth: { upload_kbps: 512 } }).success).toBe(true);
    expect(
      CreateProjectBody.safeParse({ name: "p", backend: "container", bandwidth: { upload_kbps: 512 } })
        .success,
    ).toBe(true);
    const microvm = CreateProjectBody.safeParse({
      name: "p",
      backend: "microvm",
      bandwidth: { upload_kbps: 512 },
    });
    expect(microvm.error?.issues.map((issue) => issue.path.join("."))).toEqual(["bandwidth"]);
  });

  it("the spec takes caps for a container alone", () => {
    const base = {
      projectId: "4f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f",
      ownerId: "owner",
      mode: "local",
      image: "i",
      subnet: "10.1.2.0/24",
      sshHostPort: 2200,
      host: { squidConfigFile: "/s", squidFragmentsDir: "/d", backupRoot: "/b" },
    };
    expect(TenantSpec.parse({ ...base, bandwidth: { downloadKbps: 8000 } }).bandwidth).toEqual({
      downloadKbps: 8000,
    });
    expect(TenantSpec.parse(base).bandwidth).toBeUndefined();
    expect(TenantSpec.safeParse({ ...base, bandwidth: {} }).success).toBe(false);
    const kubernetes = TenantSpec.safeParse({
      ...base,
      backend: "kubernetes",
      bandwidth: { downloadKbps: 8000 },
    });
    expect(kubernetes.error?.issues).toContainEqual(
      expect.objectContaining({
        path: ["bandwidth"],
        message: "is shaped on a container's bridge, not a kubernetes's",
      }),
    );
  });

  it("the backends' admission: a container shapes; a microVM or a Pod is refused naming why", () => {
    const backends = platformBackends({
      docker: () => {
        throw new Error("no engine here");
      },
    });
    expect(backends.traits("container").bandwidth).toBe(true);
    expect(backends.admit("container", {} as TenantDefaults, { bandwidth: true })).toEqual({});
    for (const kind of ["microvm", "kubernetes"]) {
      let refused: unknown;
      try {
        backends.admit(kind, {} as TenantDefaults, { bandwidth: true });
      } catch (error) {
        refused = error;
      }
      expect(refused).toBeInstanceOf(TenantRequestError);
      expect(refused).toMatchObject({
        status: 400,
        message: `bandwidth is shaped by tc on a container's bridge: a ${kind} project's sandbox is no container of this host's engine, and takes no caps yet`,
      });
    }
    expect(bandwidthRefused("microvm", 409).status).toBe(409);
  });
});
