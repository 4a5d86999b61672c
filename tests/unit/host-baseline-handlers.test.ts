import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createServer } from "node:net";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { RESOURCE_TYPES } from "../../lib/constants.js";
import { createProvider } from "../../provider/handler.js";
import { startEngine } from "../../lib/host/docker-engine.js";
import { containerEngineHandler } from "../../provider/resources/container-engine.js";
import {
  firewallBaselineHandler,
  FirewallBaselineInputs,
  type FirewallBaselineOutputs,
} from "../../provider/resources/firewall-baseline.js";
import {
  registryServiceHandler,
  type RegistryServiceOutputs,
} from "../../provider/resources/registry-service.js";
import {
  fileSha256,
  squidServiceHandler,
  SquidServiceInputs,
  type SquidServiceOutputs,
} from "../../provider/resources/squid-service.js";

const urn = (type: string) => `urn:pulumi:dev::agent-sandbox::sandbox:host:HostBaseline$${type}::name`;
const sha = (text: string) => createHash("sha256").update(text).digest("hex");
const UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";
const names = { inputChain: "T-IN", forwardChain: "T-FWD", bridgeMatch: "tb-+" };

describe("FirewallBaseline", () => {
  it("check names each bad chain name", async () => {
    const provider = createProvider("0.0.0", { [RESOURCE_TYPES.firewallBaseline]: firewallBaselineHandler });
    const result = await provider.check!(
      urn(RESOURCE_TYPES.firewallBaseline),
      {},
      { inputChain: "bad name", forwardChain: "-X", bridgeMatch: "tb-+" },
    );
    expect(result.failures?.map((f) => f.property).sort()).toEqual(["forwardChain", "inputChain"]);
    expect(FirewallBaselineInputs.safeParse({ ...names, forwardChain: "T-IN" }).success).toBe(false);
  });

  it("diff: rules found missing by refresh are a change; renamed chains are replaced, old ones first", async () => {
    const outs: FirewallBaselineOutputs = { ...names, rules: [], missing: [] };
    expect((await firewallBaselineHandler.diff("id", outs, names)).changes).toBe(false);
    const drifted = await firewallBaselineHandler.diff(
      "id",
      { ...outs, missing: ["iptables -A T-IN ..."] },
      names,
    );
    expect(drifted).toMatchObject({ changes: true, replaces: [] });
    const renamed = await firewallBaselineHandler.diff("id", outs, { ...names, inputChain: "T2-IN" });
    expect(renamed).toMatchObject({ changes: true, replaces: ["inputChain"], deleteBeforeReplace: true });
  });
});

describe("SquidService and RegistryService", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "svc-unit-"));
  const squidInputs = (config: string, content: string) =>
    SquidServiceInputs.parse({
      port: 1,
      config,
      pidFile: path.join(dir, "squid.pid"),
      logDir: path.join(dir, "log"),
      configSha256: sha(content),
    });

  it("check lets a hash that is unknown in a preview through, but not a malformed one", async () => {
    const provider = createProvider("0.0.0", { [RESOURCE_TYPES.squidService]: squidServiceHandler });
    const inputs = { port: 3128, config: "/etc/s.conf", pidFile: "/run/s.pid", logDir: "/var/log/s" };
    const preview = await provider.check!(
      urn(RESOURCE_TYPES.squidService),
      {},
      { ...inputs, configSha256: UNKNOWN },
    );
    expect(preview.failures).toBeUndefined();
    const bad = await provider.check!(
      urn(RESOURCE_TYPES.squidService),
      {},
      { ...inputs, configSha256: "abc" },
    );
    expect(bad.failures).toEqual([{ property: "configSha256", reason: "must be a sha256 hex digest" }]);
  });

  it("refuses to start from a config file that does not hold the declared content", async () => {
    const config = path.join(dir, "squid.conf");
    await fs.writeFile(config, "edited by hand\n");
    await expect(squidServiceHandler.create(squidInputs(config, "declared\n"))).rejects.toThrow(
      /squid\.conf does not hold the declared config/,
    );
    await expect(squidServiceHandler.create(squidInputs(path.join(dir, "none.conf"), "x"))).rejects.toThrow(
      /sha256 none/,
    );
  });

  it("read reports a stopped instance and the config's hash on disk; diff turns either into a change", async () => {
    const config = path.join(dir, "read.conf");
    await fs.writeFile(config, "declared\n");
    const inputs = squidInputs(config, "declared\n");
    const olds: SquidServiceOutputs = {
      ...inputs,
      running: true,
      pid: 1,
      configFileSha256: inputs.configSha256,
    };
    const observed = (await squidServiceHandler.read("id", olds))!;
    expect(observed).toMatchObject({ running: false, pid: 0, configFileSha256: sha("declared\n") });
    expect((await squidServiceHandler.diff("id", observed, inputs)).changes).toBe(true);
    expect((await squidServiceHandler.diff("id", olds, inputs)).changes).toBe(false);
    await fs.appendFile(config, "http_access allow all\n");
    const edited = (await squidServiceHandler.read("id", olds))!;
    expect(edited.configFileSha256).toBe(await fileSha256(config));
    expect((await squidServiceHandler.diff("id", { ...edited, running: true }, inputs)).changes).toBe(true);
  });

  it("registry: a new pid file is another instance (replaced); a config change is an update", async () => {
    const inputs = {
      port: 5999,
      config: "/etc/r.yml",
      storageDir: "/var/lib/r",
      pidFile: "/run/r.pid",
      logFile: "/var/log/r.log",
      configSha256: sha("a"),
    };
    const olds: RegistryServiceOutputs = { ...inputs, running: true, pid: 1, configFileSha256: sha("a") };
    expect((await registryServiceHandler.diff("id", olds, inputs)).changes).toBe(false);
    expect(
      await registryServiceHandler.diff("id", olds, { ...inputs, configSha256: sha("b") }),
    ).toMatchObject({
      changes: true,
      replaces: [],
    });
    expect(
      await registryServiceHandler.diff("id", olds, { ...inputs, pidFile: "/run/r2.pid" }),
    ).toMatchObject({
      replaces: ["pidFile"],
    });
  });
});

describe("ContainerEngine", () => {
  it("adopts the engine already answering on the socket and never stops it", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "engine-unit-"));
    const dockerdBefore = (await promisify(execFile)("pidof", ["dockerd"])).stdout.trim();
    const inputs = {
      socket: "/var/run/docker.sock",
      logDir: path.join(dir, "log"),
      runDir: path.join(dir, "run"),
    };
    const { outs } = await containerEngineHandler.create(inputs);
    expect(outs).toMatchObject({ running: true, startedPid: 0 });
    expect(outs.apiVersion).toMatch(/^1\.\d+$/);
    await containerEngineHandler.delete("id", outs);
    // A pid it claims to have started but that the pid file does not confirm as dockerd is left alone too.
    await containerEngineHandler.delete("id", { ...outs, startedPid: Number(dockerdBefore.split(" ")[0]) });
    expect((await promisify(execFile)("pidof", ["dockerd"])).stdout.trim()).toBe(dockerdBefore);
  });

  it("never starts a second engine on a socket something already serves", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "engine-socket-"));
    const socket = path.join(dir, "busy.sock");
    const server = createServer((connection) => connection.end()); // answers nothing Docker would
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    try {
      await expect(
        startEngine(
          { socket, logDir: path.join(dir, "log"), runDir: path.join(dir, "run") },
          () => undefined,
        ),
      ).rejects.toThrow(/serves unix:\/\/.*busy\.sock but does not answer as a Docker engine/);
    } finally {
      server.close();
    }
  });

  it("read sees an engine that stopped answering, and diff makes it a change", async () => {
    const olds = {
      socket: "/nonexistent/docker.sock",
      logDir: "/tmp/l",
      runDir: "/tmp/r",
      running: true,
      version: "20.10.24",
      apiVersion: "1.41",
      startedPid: 0,
    };
    const observed = (await containerEngineHandler.read("id", olds))!;
    expect(observed).toMatchObject({ running: false, version: "20.10.24" });
    expect((await containerEngineHandler.diff("id", observed, olds)).changes).toBe(true);
    expect(
      (await containerEngineHandler.diff("id", olds, { ...olds, socket: "/run/other.sock" })).replaces,
    ).toEqual(["socket"]);
  });
});
