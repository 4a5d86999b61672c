// What `sbx` exits with: scripts rely on these numbers (docs/cli.md lists them).

export const EXIT = {
  ok: 0,
  /** Anything not named below (the runtime answered 5xx, a network failure). */
  failure: 1,
  /** A bad command line: unknown option, missing argument. */
  usage: 2,
  /** Not logged in, or the login expired and could not be refreshed: run `sbx login`. */
  auth: 3,
  /** The project does not exist, or belongs to someone else (the API answers both with 404). */
  notFound: 4,
  /** Bad input: not a git repository, a dirty tree, a repository over the size limit, a bad name. */
  badInput: 5,
  /** The sandbox is in the wrong state for the command (stopped, being created, a worktree already there). */
  conflict: 6,
  /** The sandbox could not be reached over SSH, or git/tar there failed. */
  remote: 7,
  /** The terminal closed abnormally (the close code is printed). */
  terminal: 8,
  /**
   * What the sandbox sent was refused (an archive member in .git, a link, a device, a name outside the path
   * asked for): the sandbox is not to be trusted, and nothing of what it sent was written here.
   */
  refused: 9,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** An error the CLI reports as one line on stderr (or `{error}` with --json) and exits with `code`. */
export class CliError extends Error {
  constructor(
    readonly code: ExitCode,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = "CliError";
  }
}
