// The CLI's API client: the SDK's `Client` (sdk/src/client.ts), its tokens kept in the config file, every
// failure turned into the CliError whose exit code scripts rely on (docs/cli.md). An expired access token is
// refreshed once with POST /auth/refresh and the request sent again; a refresh that fails is a login that
// has expired. With an API key in $SBX_API_KEY, that key is sent instead of the login's tokens.
import {
  ApiError,
  AuthError,
  Client,
  NetworkError,
  type Answer,
  type CallArgs,
  type HttpMethod,
  type Operation,
  type PathsWith,
  type ProjectView,
  type TokenStore,
} from "../sdk/src/client.js";
import type { ConfigStore } from "./config.js";
import { CliError, EXIT } from "./errors.js";

export const DEFAULT_API = "http://127.0.0.1:8000";
/** How long the runtime has to answer a request (its headers; a stream's body may take longer). */
const ANSWER_WITHIN_MS = 120_000;

/** The CLI's config file as the SDK's token store; the runtime rotates refresh tokens, so the newest is kept. */
export function configTokens(store: ConfigStore): TokenStore {
  return {
    load: async () => {
      const { access_token, refresh_token } = await store.load();
      return { access_token, refresh_token };
    },
    save: async (tokens) => {
      await store.update((config) => {
        config.access_token = tokens.access_token;
        // docs/security.md#refresh-tokens-kept-or-rotated
        if (tokens.refresh_token) config.refresh_token = tokens.refresh_token;
      });
    },
  };
}

/** The environment variable whose API key (`sbx_...`) the CLI sends instead of the logged-in session's tokens. */
export const API_KEY_VARIABLE = "SBX_API_KEY";

export const loginExpired = () =>
  new CliError(EXIT.auth, "your login has expired or was revoked: run `sbx login` again");

/** The CliError an SDK failure stands for; anything else as it is. */
export function toCliError(error: unknown): unknown {
  if (error instanceof AuthError) return loginExpired();
  if (error instanceof NetworkError)
    return new CliError(
      EXIT.failure,
      `cannot reach the runtime at ${error.api}: ${(error.cause as Error).message} (is it running? sbx login --api URL)`,
    );
  if (!(error instanceof ApiError)) return error;
  const { status } = error;
  const code =
    // An image the engine lacks is the input's fault (a devcontainer's `image`), whatever status says so.
    error.code === "image_not_found"
      ? EXIT.badInput
      : status === 401
        ? EXIT.auth
        : status === 404
          ? EXIT.notFound
          : status === 409
            ? EXIT.conflict
            : status === 400 || status === 403 || status === 413
              ? EXIT.badInput
              : EXIT.failure;
  const request = error.request;
  const message = !request
    ? error.message
    : status === 404 && request.path.startsWith("/projects/")
      ? `project not found (it was deleted, or it is not yours): ${request.method} ${request.path}`
      : `${request.method} ${request.path}: ${status} ${error.message}`;
  return new CliError(code, message, error.details);
}

/** The SDK's client whose every failure is the CLI's CliError. */
export class CliClient extends Client {
  private readonly usesApiKey: boolean;

  /** `apiKey`: sent instead of the tokens in the config file (which are then neither read nor refreshed). */
  constructor(api: string, store: ConfigStore, apiKey?: string) {
    super({
      api,
      tokens: configTokens(store),
      answerWithinMs: ANSWER_WITHIN_MS,
      ...(apiKey === undefined ? {} : { apiKey }),
    });
    this.usesApiKey = apiKey !== undefined;
  }

  override async call<M extends HttpMethod, P extends PathsWith<M>>(
    method: M,
    path: P,
    ...init: CallArgs<Operation<P, M>>
  ): Promise<Answer<P, M>> {
    try {
      return await super.call(method, path, ...init);
    } catch (error) {
      if (this.usesApiKey && error instanceof AuthError)
        throw new CliError(EXIT.auth, `the API key in $${API_KEY_VARIABLE} was refused: ${error.message}`);
      throw toCliError(error);
    }
  }

  /** GET /projects/{id}. */
  async project(id: string): Promise<ProjectView> {
    return (await this.call("GET", "/projects/{id}", { params: { id } })).data;
  }
}
