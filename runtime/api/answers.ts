import { z } from "zod";
import { ProjectBody } from "./responses.js";

// The answers many routes document alike, said once.
export const project = { description: "the project", body: ProjectBody };
export const recorded = { description: "recorded; the reconciler carries it out", body: ProjectBody };
export const notFound = "no such project (another user's project is one)";
export const adminOnly = "not an operator (answered as for an unknown path)";
export const notRunning = "the sandbox is not running: `details.status` names the project's status";
/** A sandbox the platform put to sleep, woken for the request (docs/api.md, "Waking a sleeping sandbox"). */
export const wakeFailed = "the sandbox was asleep and its start failed (`wake_failed`, with its error)";
export const wakeTimeout =
  "the sandbox was asleep and its start did not finish in time (`wake_timeout`; it goes on)";
export const noProcess = "no such project, or no such background process of it in this runtime";
export const fileAnswers = {
  403: "the agent may not read or write there (`path_outside`: the path resolves out of /home/agent and /workspace)",
  404: "no such project, or no such file or directory",
  409: `${notRunning}; or the path is a directory where a file is asked for, names the root itself, or could not be written`,
  500: wakeFailed,
  504: wakeTimeout,
} as const;
/** Bytes of a body or an answer that is not JSON. */
export const binary = z.string().meta({ format: "binary" });
