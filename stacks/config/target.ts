import { z } from "zod";

/** `agent-sandbox:target`: which platform the stack builds. */
export const TargetConfig = z.enum(["local", "gcp"]);
export type TargetConfig = z.infer<typeof TargetConfig>;
