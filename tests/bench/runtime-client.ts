// What the benchmarks that drive a runtime process share: a signed-in JSON client of its API, and the
// baseline they are measured beside (a bare `docker run` of the sandbox image).
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * Registers a fresh user on the runtime at `base` and signs in as it: `api` is a request as that user,
 * its body parsed (undefined when empty).
 */
export async function signedInClient(base: string, prefix: string) {
  let token = "";
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await fetch(`${base}${url}`, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body ? { "content-type": "application/json" } : {}),
      },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  const email = `${prefix}-${Date.now()}@example.test`;
  const password = "correct horse battery staple";
  await api("POST", "/auth/register", { email, password });
  token = (await api("POST", "/auth/login", { email, password })).body.access_token;
  return { api };
}

/** Milliseconds of `count` bare container starts of `image` (after one to warm up). */
export async function bareDockerRuns(image: string, count = 5): Promise<number[]> {
  const times: number[] = [];
  await run("docker", ["run", "--rm", "--entrypoint", "true", image]);
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    await run("docker", ["run", "--rm", "--entrypoint", "true", image]);
    times.push(performance.now() - started);
  }
  return times;
}
