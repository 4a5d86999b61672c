// The drift record's vouched basis (runtime/store/drift.ts): what the engine's last clean refresh of a stack
// saw, which the next pre-check compares its Kubernetes objects with. It must never outlive a finding of drift,
// and the pre-check's own clean answers keep it; the bases compare by every part (runtime/tenants/drift-precheck.ts).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  driftBasis,
  getDrift,
  recordDrift,
  recordDriftFailure,
  type DriftBasis,
} from "../../runtime/store/drift.js";
import { sameBasis } from "../../runtime/tenants/drift-basis.js";
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
