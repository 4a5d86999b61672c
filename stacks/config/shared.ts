// What every config namespace's schema shares: the project's key namespace and the common field types.
import { z } from "zod";

/** The Pulumi project name, and so the namespace of every config key (`agent-sandbox:<key>`). */
export const PROJECT = "agent-sandbox";

/** A TCP port number. */
export const port = z.number().int().min(1).max(65535);
/** An absolute file system path. */
export const absolutePath = z.string().startsWith("/", { message: "must be an absolute path" });
