// The MCP endpoint's sessions: each one an MCP server (mcp/tools.ts) and its streamable-HTTP transport, held
// in memory for the API key that opened it and for no other. Bounded: idle sessions end, and a key (or the
// runtime) at its limit ends its least recently used session to open another.
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

export interface McpSessionLimits {
  /** Open sessions of one API key. */
  readonly perKey: number;
  /** Open sessions of the whole runtime. */
  readonly total: number;
  /** A session no request has used for this long ends. */
  readonly idleMs: number;
}

export const DEFAULT_SESSION_LIMITS: McpSessionLimits = { perKey: 16, total: 1000, idleMs: 30 * 60_000 };

export interface McpSession {
  readonly server: McpServer;
  readonly transport: StreamableHTTPServerTransport;
  /** The SHA-256 of the API key that opened it (the key itself is held by its server's client). */
  readonly keyDigest: string;
  lastUsed: number;
  /** A GET holds the session's event stream open (one at a time). */
  streaming: boolean;
}

export class McpSessions {
  private readonly open = new Map<string, McpSession>();

  constructor(private readonly limits: McpSessionLimits = DEFAULT_SESSION_LIMITS) {}

  /** The session `id` if the key of `keyDigest` opened it, its use noted; undefined otherwise. */
  find(id: string, keyDigest: string): McpSession | undefined {
    const session = this.open.get(id);
    if (!session || session.keyDigest !== keyDigest) return undefined;
    session.lastUsed = Date.now();
    return session;
  }

  add(id: string, session: McpSession): void {
    this.open.set(id, session);
  }

  remove(id: string): void {
    this.open.delete(id);
  }

  /**
   * Makes room for one more session of the key `keyDigest`: idle sessions end, then the least recently used
   * of the key's while it is at its limit, and of anyone's while the runtime is at its own.
   */
  async makeRoom(keyDigest: string): Promise<void> {
    const idleSince = Date.now() - this.limits.idleMs;
    await this.end([...this.open].filter(([, s]) => s.lastUsed < idleSince));
    const oldestFirst = () => [...this.open].sort(([, a], [, b]) => a.lastUsed - b.lastUsed);
    const keys = oldestFirst().filter(([, s]) => s.keyDigest === keyDigest);
    await this.end(keys.slice(0, Math.max(0, keys.length - this.limits.perKey + 1)));
    const all = oldestFirst();
    await this.end(all.slice(0, Math.max(0, all.length - this.limits.total + 1)));
  }

  /** Ends every session (the server is closing: their event streams must not hold it open). */
  closeAll(): Promise<void> {
    return this.end([...this.open]);
  }

  private async end(sessions: [string, McpSession][]): Promise<void> {
    for (const [id, session] of sessions) {
      this.open.delete(id);
      await session.server.close().catch(() => undefined);
    }
  }
}
