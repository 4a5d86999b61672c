/**
 * Ends the plugin when the engine that started it is gone. A plugin is the engine's child; if the engine
 * dies abruptly (its host process killed with SIGKILL), the plugin is re-parented and would otherwise
 * live on holding its port. Node has no PR_SET_PDEATHSIG, so watch the parent pid instead.
 */
export function exitWithParent(intervalMs = 1_000): void {
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(1);
  }, intervalMs).unref();
}
