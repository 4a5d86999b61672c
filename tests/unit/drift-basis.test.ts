// The drift record's vouched basis (runtime/store/drift.ts): what the engine's last clean refresh of a stack
// saw, which the next pre-check compares its Kubernetes objects with. It must never outlive a finding of drift,
// and the pre-check's own clean answers keep it; the bases compare by every part, and what cannot be read as the
// engine would read it is refused before any request (runtime/tenants/drift-basis.ts).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  driftBasis,
  getDrift,
  recordDrift,
  recordDriftFailure,
  type DriftBasis,
} from "../../runtime/store/drift.js";
import { pinnedPulumiVersion } from "../../lib/toolchain.js";
import { NotVouched, observeBasis, sameBasis, type StackObject } from "../../runtime/tenants/drift-basis.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";

const PROJECT = "5b0d8c1e-3f7a-4c2b-9e61-7a4d2f8c0b93";
const BASIS: DriftBasis = {
  checkpoint: "a".repeat(64),
  cli: "3.259.0",
  environment: "e".repeat(64),
  objects: {
    "urn:pulumi:s::p::kubernetes:core/v1:Namespace::ns": "2f1c-uid/101",
    "urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::proxy": "77ab-uid/232",
  },
};
const DRIFTED = [
  { type: "kubernetes:core/v1:ConfigMap", urn: "urn:x", change: "deleted" as const, properties: [] },
];

describe("the vouched basis of a drift record", () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await testDatabase("pglite");
    await database.db.query(
      "insert into tenants (project_id, owner_id, spec, state) values ($1, 'owner', '{}', 'running')",
      [PROJECT],
    );
  });
  afterAll(() => database?.close());

  it("is recorded by a clean check, kept by the pre-check's clean answers, cleared by drift, by null and never kept past drift", async () => {
    const { db } = database;
    expect(await driftBasis(db, PROJECT)).toBeUndefined();
    await recordDrift(db, PROJECT, [], BASIS);
    expect(await driftBasis(db, PROJECT)).toEqual(BASIS);
    // The pre-check's clean answer records no basis of its own: the vouched one stays.
    await recordDrift(db, PROJECT, []);
    expect(await driftBasis(db, PROJECT)).toEqual(BASIS);
    expect(await getDrift(db, PROJECT)).toMatchObject({ status: "clean", clean_basis: BASIS });
    // A check that could not run says nothing about the objects either way.
    await recordDriftFailure(db, PROJECT, "the cluster is unreachable", 3);
    expect(await driftBasis(db, PROJECT)).toEqual(BASIS);
    // Drift found: the basis goes, even were one given with it.
    await recordDrift(db, PROJECT, DRIFTED, BASIS);
    expect(await driftBasis(db, PROJECT)).toBeUndefined();
    await recordDrift(db, PROJECT, []);
    expect(await driftBasis(db, PROJECT)).toBeUndefined();
    // An engine's clean check that could not vouch (something changed while it read): null clears.
    await recordDrift(db, PROJECT, [], BASIS);
    await recordDrift(db, PROJECT, [], null);
    expect(await driftBasis(db, PROJECT)).toBeUndefined();
  });

  it("compares two bases by every part", () => {
    expect(sameBasis(BASIS, structuredClone(BASIS))).toBe(true);
    const urn = Object.keys(BASIS.objects)[1]!;
    for (const other of [
      { ...BASIS, checkpoint: "b".repeat(64) },
      { ...BASIS, cli: "3.260.0" },
      { ...BASIS, environment: "f".repeat(64) },
      { ...BASIS, objects: { ...BASIS.objects, [urn]: "77ab-uid/233" } },
      { ...BASIS, objects: { ...BASIS.objects, [urn]: "99cd-uid/232" } },
      { ...BASIS, objects: { [urn]: BASIS.objects[urn]! } },
      { ...BASIS, objects: { ...BASIS.objects, "urn:pulumi:s::p::kubernetes:core/v1:Secret::s": "1/1" } },
    ])
      expect(sameBasis(BASIS, other), JSON.stringify(other)).toBe(false);
  });
});

describe("reading a stack's basis", () => {
  // A cluster on a loopback port nothing listens on: each refusal below must come before any request.
  const kubeconfig = [
    "apiVersion: v1",
    "kind: Config",
    "current-context: c",
    "clusters: [{ name: k, cluster: { server: 'https://127.0.0.1:9' } }]",
    "users: [{ name: u, user: { token: t } }]",
    "contexts: [{ name: c, context: { cluster: k, user: u } }]",
  ].join("\n");
  const provider = { urn: "urn:pulumi:s::p::pulumi:providers:kubernetes::k8s", inputs: { kubeconfig } };
  const configMap: StackObject = {
    urn: "urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::proxy",
    type: "kubernetes:core/v1:ConfigMap",
    id: "sbx-a/egress-proxy",
    outputs: { metadata: { name: "egress-proxy", namespace: "sbx-a" } },
    provider,
  };
  const refusal = async (object: StackObject) => {
    const error = await observeBasis("d", [object]).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(NotVouched);
    return (error as Error).message;
  };

  it("refuses a type it does not know, an id that is not the outputs' object, a provider without its own kubeconfig", async () => {
    expect(await refusal({ ...configMap, type: "kubernetes:example.com/v1:ConfigMap" })).toBe(
      `${configMap.urn} is of a type this check does not read (kubernetes:example.com/v1:ConfigMap)`,
    );
    expect(await refusal({ ...configMap, id: "sbx-b/egress-proxy" })).toBe(
      `${configMap.urn}'s id sbx-b/egress-proxy is not the object its outputs name`,
    );
    expect(await refusal({ ...configMap, outputs: { metadata: { namespace: "sbx-a" } } })).toBe(
      `${configMap.urn}'s outputs name no object`,
    );
    expect(await refusal({ ...configMap, provider: { urn: provider.urn, inputs: {} } })).toBe(
      `${provider.urn} has no kubeconfig of its own`,
    );
    expect(
      await refusal({ ...configMap, provider: { urn: provider.urn, inputs: { kubeconfig, cluster: "k" } } }),
    ).toBe(`${provider.urn} names a cluster apart from its context`);
    expect(
      await refusal({
        ...configMap,
        provider: { urn: provider.urn, inputs: { kubeconfig: "/etc/kubeconfig" } },
      }),
    ).toMatch(/^urn:pulumi:s::p::pulumi:providers:kubernetes::k8s's kubeconfig: not a kubeconfig/);
  });

  it("holds the checkpoint, the pinned CLI and the provider's PULUMI_K8S_* settings from the environment", async () => {
    const before = await observeBasis("d", []);
    expect(before).toMatchObject({ checkpoint: "d", cli: pinnedPulumiVersion(), objects: {} });
    process.env.PULUMI_K8S_ENABLE_PATCH_FORCE = "true";
    try {
      const after = await observeBasis("d", []);
      expect(after.environment).not.toBe(before.environment);
      expect(sameBasis(before, after)).toBe(false);
    } finally {
      delete process.env.PULUMI_K8S_ENABLE_PATCH_FORCE;
    }
    expect(await observeBasis("d", [])).toEqual(before);
  });
});
