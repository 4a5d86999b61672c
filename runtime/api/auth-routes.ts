import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { Auth } from "./auth.js";
import { parseInput } from "./validation.js";

export const Credentials = z
  .object({
    email: z.email({ message: "must be an email address" }).max(254),
    // Long enough to resist guessing; bounded so hashing cannot be used to burn CPU.
    password: z
      .string()
      .min(12, { message: "must be at least 12 characters" })
      .max(1024, { message: "must be at most 1024 characters" }),
  })
  .strict();

export const RefreshRequest = z.object({ refresh_token: z.string().min(1).max(512) }).strict();

/** Seed 000 §3.1: register, login, refresh (rotating), plus logout and the caller's identity. */
export function registerAuthRoutes(app: FastifyInstance, auth: Auth): void {
  app.post("/auth/register", async (request, reply) => {
    const { email, password } = parseInput(Credentials, request.body, "body");
    return reply.status(201).send(await auth.register(email, password));
  });

  app.post("/auth/login", async (request) => {
    const { email, password } = parseInput(
      Credentials.extend({ password: z.string().min(1).max(1024) }),
      request.body,
      "body",
    );
    return auth.login(email, password, request.ip);
  });

  app.post("/auth/refresh", async (request) => {
    const { refresh_token } = parseInput(RefreshRequest, request.body, "body");
    return auth.refresh(refresh_token);
  });

  app.post("/auth/logout", async (request, reply) => {
    const { refresh_token } = parseInput(RefreshRequest, request.body, "body");
    await auth.logout(refresh_token);
    return reply.status(204).send();
  });

  app.get("/auth/me", async (request) => ({
    user_id: await auth.authenticate(request.headers.authorization),
  }));
}
