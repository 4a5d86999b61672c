import * as pulumi from "@pulumi/pulumi";
import { HostFile } from "../resources/host-file.js";

/**
 * How a project secret reaches the sandbox: `env` (a file under `/run/secrets` and a variable in the
 * agent's shells), `file` (the file only) or `gateway` (never inside: a model-API key the credential
 * gateway adds on the way out; the sandbox gets a placeholder and a base URL).
 */
export type SecretDelivery = "env" | "file" | "gateway";

/** A project secret with its value, as the reconciler hands it to the tenant program. */
export interface TenantSecret {
  readonly name: string;
  readonly delivery: SecretDelivery;
  readonly value: string;
}

/**
 * The model APIs the credential gateway fronts: the secret holding each one's key, where its real API
 * is, and what the sandbox's clients read (their base URL variable and the path under the gateway).
 */
export const GATEWAY_PROVIDERS = {
  anthropic: {
    secret: "ANTHROPIC_API_KEY",
    upstream: "https://api.anthropic.com",
    baseUrlVariable: "ANTHROPIC_BASE_URL",
    basePath: "/anthropic",
  },
  openai: {
    secret: "OPENAI_API_KEY",
    upstream: "https://api.openai.com",
    baseUrlVariable: "OPENAI_BASE_URL",
    basePath: "/openai/v1",
  },
  gemini: {
    secret: "GEMINI_API_KEY",
    upstream: "https://generativelanguage.googleapis.com",
    baseUrlVariable: "GOOGLE_GEMINI_BASE_URL",
    basePath: "/gemini",
  },
} as const;
export type GatewayProvider = keyof typeof GATEWAY_PROVIDERS;

/** What the sandbox holds instead of a gateway-delivered key (clients refuse to start without one). */
export const GATEWAY_PLACEHOLDER = "sbx-credential-gateway-placeholder";

/** The provider whose key a secret of this name is, if any. */
export function gatewayProviderOf(name: string): GatewayProvider | undefined {
  return (Object.keys(GATEWAY_PROVIDERS) as GatewayProvider[]).find(
    (provider) => GATEWAY_PROVIDERS[provider].secret === name,
  );
}

/** The file the sandbox's login shells source (`/etc/profile.d/agent-sandbox-secrets.sh`). */
export const SECRETS_ENV_FILE = "agent.env";

const shellQuote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`;

/**
 * `agent.env`: an `export` line per `env` secret, and for each gateway-delivered key its placeholder and
 * base URL (on the tenant's own gateway address). Pure: the unit tests read it as the contract.
 */
export function secretsEnvFile(secrets: readonly TenantSecret[], gatewayUrl: string | undefined): string {
  const lines = ["# Project secrets (PUT /projects/{id}/secrets/{name}), written by the tenant's stack."];
  for (const secret of [...secrets].sort((a, b) => a.name.localeCompare(b.name))) {
    if (secret.delivery === "env") lines.push(`export ${secret.name}=${shellQuote(secret.value)}`);
    const provider = gatewayProviderOf(secret.name);
    if (secret.delivery !== "gateway" || provider === undefined) continue;
    if (gatewayUrl === undefined) {
      lines.push(`# ${secret.name}: this platform runs no credential gateway`);
      continue;
    }
    const { baseUrlVariable, basePath } = GATEWAY_PROVIDERS[provider];
    lines.push(
      `export ${secret.name}=${shellQuote(GATEWAY_PLACEHOLDER)}`,
      `export ${baseUrlVariable}=${shellQuote(`${gatewayUrl}${basePath}`)}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/**
 * What a sandbox's /run/secrets holds, by file name: `agent.env`, and one file per `env` or `file` secret (a
 * gateway-delivered key never enters). {@link TenantSecrets} writes these to the host for a container's
 * mount; a microVM gets them on its configuration disk.
 */
export function secretFiles(
  secrets: readonly TenantSecret[],
  gatewayUrl: string | undefined,
): Record<string, string> {
  return {
    [SECRETS_ENV_FILE]: secretsEnvFile(secrets, gatewayUrl),
    ...Object.fromEntries(secrets.filter((s) => s.delivery !== "gateway").map((s) => [s.name, s.value])),
  };
}

export interface TenantSecretsArgs {
  /** The tenant's own host directory, bind-mounted read-only at `/run/secrets`. */
  readonly dir: string;
  readonly secrets: readonly TenantSecret[];
  /** `http://<gateway>:<port>` of the credential gateway, when the platform runs one. */
  readonly gatewayUrl?: pulumi.Input<string | undefined>;
}

/**
 * The project's secrets as files in its host directory (Pulumi secrets in the stack's state): `agent.env`
 * always (so the directory exists before the container mounts it), and `<NAME>` for each `env` or `file`
 * secret. World-readable inside the sandbox (its agent reads them); on the host, the secrets root above
 * the directory is root-only.
 */
export class TenantSecrets extends pulumi.ComponentResource {
  public readonly files: HostFile[];

  constructor(name: string, args: TenantSecretsArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Secrets", name, {}, opts);
    const child = { parent: this };
    const env = new HostFile(
      `${name}-env`,
      {
        path: `${args.dir}/${SECRETS_ENV_FILE}`,
        content: pulumi.secret(
          pulumi.output(args.gatewayUrl).apply((url) => secretsEnvFile(args.secrets, url ?? undefined)),
        ),
        mode: "0444",
      },
      child,
    );
    this.files = [env];
    for (const secret of args.secrets) {
      if (secret.delivery === "gateway") continue;
      this.files.push(
        new HostFile(
          `${name}-${secret.name}`,
          { path: `${args.dir}/${secret.name}`, content: pulumi.secret(secret.value), mode: "0444" },
          child,
        ),
      );
    }
    this.registerOutputs({});
  }
}
