import { promises as fs } from "node:fs";
import * as path from "node:path";
import {
  LocalWorkspace,
  PulumiCommand,
  type EngineEvent,
  type PulumiFn,
  Stack,
} from "@pulumi/pulumi/automation/index.js";
import { tenantProgram } from "../../stacks/tenant/program.js";
import { stackNameOf, type TenantSpecInput } from "../../stacks/tenant/spec.js";
import { purgeRemovedStackState } from "../stack-state.js";
import { toolchain } from "../toolchain.js";

/** The Pulumi project every tenant stack belongs to. */
export const TENANT_PROJECT = "agent-sandbox-tenant";

export interface TenantStackOptions {
  /** `file:///...` here, `gs://<bucket>/state` on GCP. */
  readonly backendUrl: string;
  /** One work directory per tenant lives under here (a shared one corrupts workspace.json, pulumi#8186). */
  readonly workRoot: string;
  /** Secrets provider: `passphrase` with this passphrase, or a `gcpkms://` URL. */
  readonly secretsProvider?: string;
  readonly passphrase?: string;
  readonly onEvent?: (event: EngineEvent) => void;
}

async function localWorkspace(
  projectId: string,
  program: PulumiFn,
  options: TenantStackOptions,
): Promise<LocalWorkspace> {
  const chain = toolchain();
  const workDir = path.join(options.workRoot, stackNameOf(projectId));
  await fs.mkdir(workDir, { recursive: true });
  return LocalWorkspace.create({
    workDir,
    program,
    pulumiCommand: await PulumiCommand.get({ root: chain.pulumiRoot, skipVersionCheck: false }),
    projectSettings: { name: TENANT_PROJECT, runtime: "nodejs", backend: { url: options.backendUrl } },
    secretsProvider: options.secretsProvider ?? "passphrase",
    envVars: {
      ...chain.env,
      ...(options.passphrase ? { PULUMI_CONFIG_PASSPHRASE: options.passphrase } : {}),
    },
  });
}

async function workspaceFor(
  projectId: string,
  program: PulumiFn,
  options: TenantStackOptions,
): Promise<Stack> {
  const workspace = await localWorkspace(projectId, program, options);
  return Stack.createOrSelect(stackNameOf(projectId), workspace);
}

/** `pulumi up` of the tenant's stack: creates it on first use, converges it afterwards. */
export async function upTenant(spec: TenantSpecInput, options: TenantStackOptions) {
  const stack = await workspaceFor(spec.projectId, tenantProgram(spec), options);
  return stack.up({ onEvent: options.onEvent });
}

/** The tenant's stack for refresh/preview, with its program (needed by preview). */
export async function tenantStack(spec: TenantSpecInput, options: TenantStackOptions): Promise<Stack> {
  return workspaceFor(spec.projectId, tenantProgram(spec), options);
}

/**
 * Destroys every resource of the tenant, removes the stack and purges what the backend keeps of it.
 * A tenant whose stack no longer exists is already deleted: a second delete is a no-op.
 */
export async function destroyTenant(
  projectId: string,
  options: TenantStackOptions,
): Promise<"deleted" | "absent"> {
  const stackName = stackNameOf(projectId);
  const workspace = await localWorkspace(projectId, async () => ({}), options);
  if (!(await workspace.listStacks()).some((s) => s.name === stackName)) {
    await fs.rm(path.join(options.workRoot, stackName), { recursive: true, force: true });
    return "absent";
  }
  const stack = await Stack.select(stackName, workspace);
  await stack.destroy({ onEvent: options.onEvent });
  await stack.workspace.removeStack(stackName);
  if (options.backendUrl.startsWith("file://"))
    await purgeRemovedStackState(options.backendUrl, TENANT_PROJECT, stackName);
  await fs.rm(path.join(options.workRoot, stackName), { recursive: true, force: true });
  return "deleted";
}
