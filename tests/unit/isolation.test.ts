// A container's isolation (issue 48): what a create's `isolation` adds to the spec through the backend's
// admission, each refusal's words, the spec's rule, and the container resource's runtime input.
import { describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import { DockerContainerInputs } from "../../provider/resources/docker-container.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { gvisorCheck, type GvisorSupport } from "../../runtime/gvisor-support.js";
import { TenantRequestError, type TenantDefaults } from "../../runtime/tenants/service.js";

const backends = platformBackends({
  docker: () => {
    throw new Error("no engine here");
  },
});
const AVAILABLE: GvisorSupport = { available: true, runtime: "runsc", kernel: "4.4.0; gVisor", ms: 1 };
const defaults = (extra: Partial<TenantDefaults> = {}) => ({ ...extra }) as TenantDefaults;

/** The refusal `admit` throws: its status and message. */
function refusal(call: () => unknown): { status: number; message: string } {
  try {
    call();
  } catch (error) {
    if (error instanceof TenantRequestError) return { status: error.status, message: error.message };
    throw error;
  }
  throw new Error("admitted");
}

describe("a container's isolation at its create", () => {
  it("runc adds nothing to the spec (as every spec before there was a choice); gVisor where the probe found it", () => {
    expect(backends.admit("container", defaults())).toEqual({});
    expect(backends.admit(undefined, defaults(), { isolation: "runc" })).toEqual({});
    expect(
      backends.admit("container", defaults({ gvisor: () => AVAILABLE }), { isolation: "gvisor" }),
    ).toEqual({
      isolation: "gvisor",
    });
    // The platform's default, where the create does not say.
    expect(backends.admit("container", defaults({ isolation: "gvisor", gvisor: () => AVAILABLE }))).toEqual({
      isolation: "gvisor",
    });
  });

  it("refuses gVisor on a host whose probe refused it, while the probe runs, and where none probes: 409 naming why", () => {
    const unavailable: GvisorSupport = { available: false, reason: "the engine offers no runsc runtime" };
    expect(
      refusal(() =>
        backends.admit("container", defaults({ gvisor: () => unavailable }), { isolation: "gvisor" }),
      ),
    ).toEqual({
      status: 409,
      message: "isolation gvisor is not available on this host: the engine offers no runsc runtime",
    });
    expect(
      refusal(() =>
        backends.admit("container", defaults({ gvisor: () => undefined }), { isolation: "gvisor" }),
      ),
    ).toMatchObject({
      status: 409,
      message: expect.stringMatching(/still running; retry in a few seconds$/),
    });
    expect(refusal(() => backends.admit("container", defaults(), { isolation: "gvisor" }))).toMatchObject({
      status: 409,
      message: expect.stringMatching(/no gVisor probe runs here/),
    });
  });

  it("refuses any isolation for a backend that is no container, before its own admission", () => {
    for (const kind of ["microvm", "kubernetes"])
      for (const isolation of ["runc", "gvisor"] as const)
        expect(refusal(() => backends.admit(kind, defaults(), { isolation }))).toEqual({
          status: 400,
          message: `isolation is a container's choice of runtime: a ${kind} project's sandbox is no container of this host's engine, and takes none`,
        });
    // The platform's default isolation is a container's: a microVM's create is not refused for it.
    expect(
      refusal(() => backends.admit("microvm", defaults({ isolation: "gvisor", gvisor: () => AVAILABLE }))),
    ).toMatchObject({ status: 409, message: expect.stringMatching(/microvm backend is not available/) });
  });

  it("the spec takes gvisor for a container alone", () => {
    const base = {
      projectId: "4f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f",
      ownerId: "owner",
      mode: "local",
      image: "i",
      subnet: "10.1.2.0/24",
      sshHostPort: 2200,
      host: { squidConfigFile: "/s", squidFragmentsDir: "/d", backupRoot: "/b" },
    };
    expect(TenantSpec.parse({ ...base, isolation: "gvisor" }).isolation).toBe("gvisor");
    const microvm = TenantSpec.safeParse({
      ...base,
      isolation: "gvisor",
      backend: "microvm",
      microvm: {
        kernel: "/k",
        initrd: "/i",
        accelerator: "tcg",
        stateRoot: "/s",
        platformKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
      },
    });
    expect(microvm.error?.issues).toEqual([
      expect.objectContaining({
        path: ["isolation"],
        message: "gvisor is a container's isolation, not a microvm's",
      }),
    ]);
    expect(TenantSpec.safeParse({ ...base, isolation: "kata" }).success).toBe(false);
  });

  it("the container resource takes an OCI runtime's name, and nothing else", () => {
    const inputs = {
      name: "sbx-x",
      image: "i",
      memoryBytes: 256 << 20,
      nanoCpus: 1e9,
      pidsLimit: 64,
      network: "n",
      ipv4Address: "10.1.2.2",
    };
    expect(DockerContainerInputs.parse({ ...inputs, runtime: "runsc" }).runtime).toBe("runsc");
    expect(DockerContainerInputs.parse(inputs).runtime).toBeUndefined();
    expect(DockerContainerInputs.safeParse({ ...inputs, runtime: "../runc" }).success).toBe(false);
  });

  it("/healthz's gvisor line: ready unless gVisor is the platform's default and is missing", () => {
    expect(gvisorCheck(AVAILABLE, true)).toEqual({
      name: "gvisor",
      ready: true,
      detail: "runtime runsc: 4.4.0; gVisor (probed in 1 ms)",
    });
    expect(gvisorCheck({ available: false, reason: "r" }, true)).toMatchObject({ ready: false });
    expect(gvisorCheck({ available: false, reason: "r" }, false)).toMatchObject({ ready: true });
  });
});
