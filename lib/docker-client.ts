import Docker from "dockerode";

/** Default Docker Engine API socket (Debian's docker.io and the GCP host both use it). */
export const DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock";

/** The engine's socket path from `DOCKER_HOST` (only `unix://` is supported), else the default. */
export function dockerSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.DOCKER_HOST;
  if (!host) return DEFAULT_DOCKER_SOCKET;
  if (!host.startsWith("unix://")) {
    throw new Error(`DOCKER_HOST=${host} is not supported: use a unix:// socket path`);
  }
  return host.slice("unix://".length);
}

export function dockerClient(env: NodeJS.ProcessEnv = process.env): Docker {
  return new Docker({ socketPath: dockerSocketPath(env) });
}

/** dockerode errors carry the engine's HTTP status. */
export function isNotFound(error: unknown): boolean {
  return (error as { statusCode?: number }).statusCode === 404;
}

/** The engine's answer, or `undefined` when the object does not exist (any other failure is thrown). */
export async function unlessNotFound<T>(request: Promise<T>): Promise<T | undefined> {
  try {
    return await request;
  } catch (error) {
    if (isNotFound(error)) return undefined;
    throw error;
  }
}
