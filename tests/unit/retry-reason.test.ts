// Which failed operations the reconciler runs again (runtime/reconciler/retry.ts): those whose cause was not
// theirs, each a bounded number of times, and never one its user cancelled.
import { describe, expect, it } from "vitest";
import { MAX_PROVIDER_ATTEMPTS, retryReason, type FailedAttempt } from "../../runtime/reconciler/retry.js";

const failed = (fields: Partial<FailedAttempt> = {}): FailedAttempt => ({
  attempt: 1,
  cancelled: false,
  stateBackendFull: false,
  room: false,
  clusterUnreachable: false,
  clusterBack: false,
  providerExited: false,
  engineDied: async () => false,
  ...fields,
});

describe("retryReason", () => {
  it("fails an operation that failed of itself, and one its user cancelled whatever else happened", async () => {
    expect(await retryReason(failed())).toBeUndefined();
    expect(
      await retryReason(failed({ cancelled: true, clusterUnreachable: true, clusterBack: true })),
    ).toBeUndefined();
    expect(await retryReason(failed({ cancelled: true, providerExited: true }))).toBeUndefined();
  });

  it("runs again one whose cluster went away once it answers, and fails one whose cluster never came back", async () => {
    expect(await retryReason(failed({ clusterUnreachable: true, clusterBack: true }))).toBe(
      "its cluster's API server was out of reach",
    );
    // Past the provider's attempts too: the cluster's limit is the reconciler's (MAX_CLUSTER_ATTEMPTS).
    expect(
      await retryReason(
        failed({ attempt: MAX_PROVIDER_ATTEMPTS + 1, clusterUnreachable: true, clusterBack: true }),
      ),
    ).toBe("its cluster's API server was out of reach");
    expect(await retryReason(failed({ clusterUnreachable: true, clusterBack: false }))).toBeUndefined();
  });

  it("runs again one whose shared provider or engine died, up to the provider's attempts", async () => {
    expect(await retryReason(failed({ providerExited: true }))).toBe("the shared provider exited during it");
    expect(await retryReason(failed({ engineDied: async () => true }))).toBe("its engine died during it");
    expect(
      await retryReason(failed({ attempt: MAX_PROVIDER_ATTEMPTS, providerExited: true })),
    ).toBeUndefined();
  });

  it("runs again one that waited for room on its state backend and got it", async () => {
    expect(await retryReason(failed({ stateBackendFull: true, room: true }))).toBe(
      "its state backend had no space left",
    );
    expect(await retryReason(failed({ stateBackendFull: true, room: false }))).toBeUndefined();
  });
});
