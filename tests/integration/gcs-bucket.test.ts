// Issue 21, bad input: the GCP runtime's `bucket` prerequisite (runtime/health.ts) against a real GCS JSON
// API (fake-gcs-server on loopback, whose buckets are in US-CENTRAL1 as Google's default): the platform
// bucket there and in gcp.region is ready; in another region, missing, or GCS unreachable, /healthz says
// not ready naming the bucket and the key. The same client the runtime builds, only the endpoint differs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GcsClient, bucketRegionProblem } from "../../runtime/gcp/storage.js";
import { bucketPrerequisite } from "../../runtime/health.js";
import { startFakeGcs, type FakeGcs } from "../helpers/fake-gcs.js";
import { freePort } from "../helpers/host.js";

let gcs: FakeGcs;
let client: GcsClient;

beforeAll(async () => {
  gcs = await startFakeGcs();
  await gcs.createBucket("platform-data");
  client = new GcsClient(() => Promise.resolve(undefined), gcs.endpoint);
});

afterAll(async () => {
  await gcs?.stop();
});

describe("the platform bucket's prerequisite", () => {
  it("is ready when the bucket is in gcp.region, and says where it is", async () => {
    expect(await client.bucketLocation("platform-data")).toEqual({
      location: "US-CENTRAL1",
      locationType: "region",
    });
    expect(await bucketPrerequisite(client, "platform-data", "us-central1").probe()).toEqual({
      name: "bucket",
      ready: true,
      detail: "gs://platform-data (US-CENTRAL1, region)",
    });
  });

  it("is not ready when gcp.region is another region, naming both and the key", async () => {
    expect(await bucketPrerequisite(client, "platform-data", "europe-west1").probe()).toEqual({
      name: "bucket",
      ready: false,
      detail:
        "bucket gs://platform-data is in US-CENTRAL1, not in agent-sandbox:gcp.region europe-west1: set gcp.region to the bucket's region, or use a bucket in europe-west1",
    });
  });

  it("is not ready when the bucket does not exist, or GCS cannot be reached, naming it", async () => {
    expect(await bucketPrerequisite(client, "no-such-bucket", "us-central1").probe()).toEqual({
      name: "bucket",
      ready: false,
      detail: "bucket gs://no-such-bucket does not exist",
    });
    const nowhere = new GcsClient(() => Promise.resolve(undefined), `http://127.0.0.1:${await freePort()}`);
    const check = await bucketPrerequisite(nowhere, "platform-data", "us-central1").probe();
    expect(check.ready).toBe(false);
    expect(check.detail).toMatch(/^reading gs:\/\/platform-data: cannot reach http:\/\/127\.0\.0\.1:\d+/);
  });
});

describe("which locations suit a region", () => {
  it("the region itself, or a multi-region over it; never another region or a dual-region", () => {
    expect(bucketRegionProblem("b", "EUROPE-WEST1", "europe-west1")).toBeUndefined();
    expect(bucketRegionProblem("b", "EU", "europe-west4")).toBeUndefined();
    expect(bucketRegionProblem("b", "US", "us-east1")).toBeUndefined();
    expect(bucketRegionProblem("b", "ASIA", "asia-northeast1")).toBeUndefined();
    expect(bucketRegionProblem("b", "EU", "us-central1")).toMatch(
      /is in EU, not in agent-sandbox:gcp\.region us-central1/,
    );
    expect(bucketRegionProblem("b", "US", "northamerica-northeast1")).toMatch(/is in US/);
    expect(bucketRegionProblem("b", "EUROPE-WEST4", "europe-west1")).toMatch(/is in EUROPE-WEST4/);
    expect(bucketRegionProblem("b", "EUR4", "europe-west4")).toMatch(/is in EUR4/);
    expect(bucketRegionProblem("b", "", "europe-west1")).toMatch(/is in an unknown location/);
  });
});
