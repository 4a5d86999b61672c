import type { Database } from "./db.js";

/**
 * The schema, one migration per entry, applied in order exactly once (recorded in schema_migrations).
 * Never edit a released migration: add one.
 */
export const MIGRATIONS: readonly { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: "tenants and operations",
    sql: `
      create table tenants (
        project_id   text primary key,
        owner_id     text not null,
        spec         jsonb not null,
        -- Network and port allocations; released (set null) only when a delete has finished, so a
        -- freed subnet is never handed out while its old bridge or rules may still exist.
        subnet       text unique,
        ssh_port     integer unique,
        state        text not null default 'creating'
                     check (state in ('creating', 'running', 'stopped', 'updating', 'deleting', 'deleted', 'error')),
        last_error   text,
        created_at   timestamptz not null default now(),
        updated_at   timestamptz not null default now()
      );

      create table operations (
        id               text primary key,
        project_id       text not null references tenants (project_id),
        kind             text not null check (kind in ('create', 'start', 'stop', 'update', 'delete', 'check-drift')),
        state            text not null default 'pending'
                         check (state in ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
        idempotency_key  text unique,
        attempt          integer not null default 0,
        lease_owner      text,
        lease_expires_at timestamptz,
        cancel_requested boolean not null default false,
        error            text,
        result           jsonb,
        created_at       timestamptz not null default now(),
        started_at       timestamptz,
        finished_at      timestamptz
      );
      create index operations_open on operations (project_id, created_at) where state in ('pending', 'running');

      create table operation_events (
        operation_id text not null references operations (id),
        seq          integer not null,
        at           timestamptz not null default now(),
        event        jsonb not null,
        primary key (operation_id, seq)
      );
    `,
  },
  {
    version: 2,
    name: "users and refresh tokens",
    sql: `
      create table users (
        id            uuid primary key,
        email         text not null unique,
        password_hash text not null,
        created_at    timestamptz not null default now(),
        deleted_at    timestamptz
      );

      -- Refresh tokens are stored hashed. Each login starts a family; every refresh uses one token up and
      -- issues the next of the same family; presenting a used or revoked one revokes the whole family.
      create table refresh_tokens (
        id          uuid primary key,
        user_id     uuid not null references users (id) on delete cascade,
        family_id   uuid not null,
        token_hash  text not null unique,
        expires_at  timestamptz not null,
        created_at  timestamptz not null default now(),
        used_at     timestamptz,
        revoked_at  timestamptz
      );
      create index refresh_tokens_family on refresh_tokens (family_id);

      -- Failed logins per account and per client address, for throttling.
      create table login_failures (
        key        text primary key,
        failures   integer not null,
        first_at   timestamptz not null
      );
    `,
  },
  {
    version: 3,
    name: "projects",
    sql: `
      -- A user's project (seed 000 §2); its sandbox is the tenant of the same id.
      create table projects (
        id                 text primary key references tenants (project_id),
        user_id            uuid not null references users (id) on delete cascade,
        name               text not null,
        -- Encrypted with the runtime's secrets key (AES-256-GCM); never stored or logged in clear.
        ssh_private_key    text not null,
        created_at         timestamptz not null default now(),
        last_connection_at timestamptz
      );
      create index projects_user on projects (user_id, created_at);
    `,
  },
  {
    version: 4,
    name: "operations in arrival order",
    sql: `
      -- now() is the transaction's start: two operations recorded in one transaction, or in the same
      -- microsecond, would tie on created_at. A sequence orders them as they arrived.
      alter table operations add column seq bigserial;
      create index operations_open_seq on operations (project_id, seq) where state in ('pending', 'running');
    `,
  },
  {
    version: 5,
    name: "snapshots and restores",
    sql: `
      alter table tenants drop constraint tenants_state_check;
      alter table tenants add constraint tenants_state_check check (state in
        ('creating', 'running', 'stopped', 'updating', 'snapshotting', 'restoring', 'deleting', 'deleted', 'error'));
      alter table operations drop constraint operations_kind_check;
      alter table operations add constraint operations_kind_check check (kind in
        ('create', 'start', 'stop', 'update', 'snapshot', 'restore', 'delete', 'check-drift'));
      -- Seed 000 §5.2: a snapshot is the sandbox's system state committed and pushed to the registry
      -- (its /home/agent is the volume, backed up by rclone). The newest few are kept per project.
      create table snapshots (
        project_id  text not null references tenants (project_id),
        tag         text not null,
        image       text not null,
        digest      text not null,
        created_at  timestamptz not null default now(),
        primary key (project_id, tag)
      );
      create index snapshots_newest on snapshots (project_id, created_at desc);
      -- What the backup daemon last reported (GET /projects/{id}/backup-status while the sandbox is stopped).
      alter table tenants add column last_backup jsonb;
      -- A project's current operation is its newest: GET /projects reads it for every project.
      create index operations_project_newest on operations (project_id, seq desc);
    `,
  },
  {
    version: 6,
    name: "terminal sessions and their audit",
    sql: `
      -- Terminal tickets are single-use: redeeming one records its id; a second redemption conflicts.
      create table terminal_tickets (
        id          text primary key,
        expires_at  timestamptz not null
      );
      create index terminal_tickets_expiry on terminal_tickets (expires_at);

      create table terminal_sessions (
        id          uuid primary key,
        project_id  text not null references tenants (project_id),
        user_id     uuid not null,
        started_at  timestamptz not null default now(),
        ended_at    timestamptz,
        end_code    integer,
        end_reason  text,
        -- The asciinema v2 recording (seed 000 §7.4: every session is kept for review).
        cast_path   text not null,
        input_bytes bigint not null default 0,
        output_bytes bigint not null default 0
      );
      create index terminal_sessions_project on terminal_sessions (project_id, started_at desc);

      -- Every input frame, written by the proxy outside the sandbox. Append-only: a trigger refuses
      -- updates and deletes, so not even the runtime's own code can rewrite what was typed.
      create table terminal_audit (
        id          bigserial primary key,
        session_id  uuid not null references terminal_sessions (id),
        project_id  text not null,
        user_id     uuid not null,
        at          timestamptz not null,
        kind        text not null check (kind in ('input', 'resize')),
        data        bytea not null
      );
      create index terminal_audit_project on terminal_audit (project_id, id);
      -- (One line: statements are split at a semicolon that ends a line.)
      create function terminal_audit_append_only() returns trigger language plpgsql as
        $$ begin raise exception 'terminal_audit is append-only'; end $$;
      create trigger terminal_audit_append_only before update or delete on terminal_audit
        for each row execute function terminal_audit_append_only();
    `,
  },
  {
    version: 7,
    name: "terminal audit: where a session was cut at its byte cap",
    sql: `
      alter table terminal_audit drop constraint terminal_audit_kind_check;
      alter table terminal_audit add constraint terminal_audit_kind_check
        check (kind in ('input', 'resize', 'truncated'));
    `,
  },
  {
    version: 8,
    name: "rate limits and redeemed invites",
    sql: `
      -- Token buckets (runtime/api/rate-limit.ts), in the database so that every API process, and the
      -- same process after a restart, spends one budget.
      create table rate_limits (
        key         text primary key,
        tokens      double precision not null,
        updated_at  timestamptz not null
      );

      -- Invite codes are signed, not stored (minting one needs no database); redeeming one records its
      -- id here, in the transaction that creates the account, so a code works once.
      create table invites_redeemed (
        id           text primary key,
        user_id      uuid not null references users (id) on delete cascade,
        redeemed_at  timestamptz not null default now()
      );
    `,
  },
  {
    version: 9,
    name: "background jobs and idle shutdown",
    sql: `
      -- One row per background job (runtime/jobs/): its last run, as every replica and /metrics see it.
      create table job_runs (
        job               text primary key,
        last_started_at   timestamptz,
        last_finished_at  timestamptz,
        last_duration_ms  integer,
        last_outcome      text check (last_outcome in ('succeeded', 'failed')),
        last_detail       jsonb,
        runs              bigint not null default 0,
        failures          bigint not null default 0
      );
      -- Seed 000 §5.3: an idle project is snapshotted and stopped, unless its owner opted out.
      alter table projects add column idle_shutdown boolean not null default true;
    `,
  },
  {
    version: 10,
    name: "drift checks per project",
    sql: `
      -- The last drift check of each tenant stack (runtime/tenants/drift.ts), what its owner and operators see.
      create table project_drift (
        project_id  text primary key references tenants (project_id),
        checked_at  timestamptz not null,
        status      text not null check (status in ('clean', 'drifted', 'failed')),
        resources   jsonb not null default '[]',
        error       text,
        failures    integer not null default 0,
        stalled     boolean not null default false
      );
      -- null: the platform's tenants.driftRemediation applies.
      alter table projects add column drift_remediation text check (drift_remediation in ('report', 'repair'));
    `,
  },
  {
    version: 11,
    name: "tenant program versions",
    sql: `
      -- The tenant program version (stacks/tenant/version.ts) each stack was last applied with.
      alter table tenants add column program_version text;
      -- An operation a rollout queued carries the version it applies; only a worker running that program
      -- takes it (null: any worker).
      alter table operations add column program_version text;
    `,
  },
  {
    version: 12,
    name: "an image for the next start",
    sql: `
      -- PATCH /projects/{id} with an image and no restart: the running sandbox keeps its image until the
      -- next start, which applies this one (runtime/tenants/service.ts).
      alter table tenants add column pending_image text;
    `,
  },
  {
    version: 13,
    name: "refresh tokens presented again",
    sql: `
      -- A refresh token's family lets its head (the newest used token) be presented again once the access
      -- token it last bought is nearly spent (runtime/api/auth.ts, docs/security.md): replaced_at marks a
      -- token that may never be presented again, reusable_at when the head may be.
      alter table refresh_tokens add column replaced_at timestamptz;
      alter table refresh_tokens add column reusable_at timestamptz;
      -- Before this, every used token was used up.
      update refresh_tokens set replaced_at = used_at where used_at is not null;
    `,
  },
  {
    version: 14,
    name: "project secrets and the credential gateway's log",
    sql: `
      -- Write-only project secrets (runtime/tenants/project-secrets.ts), sealed with the platform's key.
      create table project_secrets (
        project_id text not null references tenants (project_id),
        name       text not null,
        sealed     text not null,
        delivery   text not null check (delivery in ('env', 'file', 'gateway')),
        updated_at timestamptz not null default now(),
        primary key (project_id, name)
      );
      -- Each request the credential gateway forwarded for a project (runtime/gateway/): never the key.
      create table gateway_requests (
        id             bigserial primary key,
        project_id     text not null,
        at             timestamptz not null,
        provider       text not null,
        host           text not null,
        method         text not null,
        path           text not null,
        status         integer,
        request_bytes  bigint not null default 0,
        response_bytes bigint not null default 0,
        duration_ms    integer not null default 0,
        error          text
      );
      create index gateway_requests_project on gateway_requests (project_id, id desc);
    `,
  },
  {
    version: 15,
    name: "sandbox exec audit",
    sql: `
      -- Each command run through the exec API (issue 23): who, what, where, how it ended and how much it
      -- printed; never its stdin, its output or its environment's values.
      create table sandbox_execs (
        id            text primary key,
        project_id    text not null,
        user_id       text not null,
        command       jsonb not null,
        shell         boolean not null default false,
        cwd           text,
        env_names     jsonb not null default '[]',
        background    boolean not null default false,
        started_at    timestamptz not null default now(),
        finished_at   timestamptz,
        exit_code     integer,
        duration_ms   integer,
        stdin_bytes   bigint not null default 0,
        stdout_bytes  bigint not null default 0,
        stderr_bytes  bigint not null default 0,
        timed_out     boolean not null default false,
        killed_by     text
      );
      create index sandbox_execs_project on sandbox_execs (project_id, started_at desc);
    `,
  },
  {
    version: 16,
    name: "warm pool",
    sql: `
      -- The warm pool (runtime/tenants/pool.ts): tenants made ahead of demand, owned by 'pool' until a create
      -- claims one. class says what a member was made for (the default image and limits): a member of
      -- another class is drained, never handed out. A claimed member keeps its row (who, when).
      create table pool_members (
        project_id text primary key references tenants (project_id),
        class      text not null,
        created_at timestamptz not null default now(),
        claimed_at timestamptz,
        claimed_by text
      );
      create index pool_members_ready on pool_members (class, created_at) where claimed_at is null;
    `,
  },
  {
    version: 17,
    name: "ssh gateway host keys",
    sql: `
      -- The SSH gateway's host key for each kubernetes project (runtime/kubernetes/ssh-gateway.ts): made at its
      -- first listen, kept so a client's pin holds across runtime restarts; the private key sealed (SecretBox).
      create table ssh_gateway_host_keys (
        project_id  text primary key references tenants (project_id),
        public_key  text not null,
        private_key text not null,
        created_at  timestamptz not null default now()
      )
    `,
  },
  {
    version: 18,
    name: "login failures: when the last one was, for the per-address delay",
    sql: `
      alter table login_failures add column last_at timestamptz;
      update login_failures set last_at = first_at
    `,
  },
  {
    version: 19,
    name: "api keys",
    sql: `
      -- Long-lived, revocable credentials of a user (runtime/api/auth.ts): only the key's SHA-256 is kept
      -- (a key is 256 random bits, so no slow hash is needed); prefix is its first characters, shown in lists.
      create table api_keys (
        id           text primary key,
        user_id      uuid not null references users (id),
        name         text not null,
        prefix       text not null,
        key_hash     text not null unique,
        created_at   timestamptz not null default now(),
        expires_at   timestamptz,
        last_used_at timestamptz,
        revoked_at   timestamptz
      );
      create index api_keys_user on api_keys (user_id, created_at)
    `,
  },
  {
    version: 20,
    name: "e2b sandboxes",
    sql: `
      -- The projects made through the E2B-compatible API (runtime/api/e2b/): what the SDK asked for, and when
      -- the sandbox's timeout ends (past it, the timeout job kills it, or pauses it where asked).
      create table e2b_sandboxes (
        project_id  text primary key references tenants (project_id),
        template    text not null,
        metadata    jsonb not null default '{}',
        env_vars    jsonb not null default '{}',
        timeout_at  timestamptz not null,
        on_timeout  text not null default 'kill' check (on_timeout in ('kill', 'pause')),
        created_at  timestamptz not null default now()
      );
      create index e2b_sandboxes_timeout on e2b_sandboxes (timeout_at)
    `,
  },
  {
    version: 21,
    name: "warm pool readiness",
    sql: `
      -- A member is handed out only once its first command has run (runtime/tenants/pool.ts): ready_at is when
      -- the pool's check did, through the same path as the exec API. A stack that is up is not yet ready.
      alter table pool_members add column ready_at timestamptz
    `,
  },
  {
    version: 22,
    name: "e2b auto-resume",
    sql: `
      -- A paused E2B sandbox asked to auto-resume is woken by its envd's traffic (runtime/tenants/wake.ts).
      alter table e2b_sandboxes add column auto_resume boolean not null default false
    `,
  },
  {
    version: 23,
    name: "forks",
    sql: `
      -- A fork (POST /projects/{id}/fork, runtime/tenants/fork.ts): the project its home was copied from and
      -- the point the copy was taken at (the source's freeze). A tree: a fork's forks point at it.
      alter table projects add column forked_from text references projects (id);
      alter table projects add column forked_at timestamptz;
      create index projects_forked_from on projects (forked_from) where forked_from is not null
    `,
  },
  {
    version: 24,
    name: "idle action and pause",
    sql: `
      -- What the idle handling does to the project (issue 44): pause it (its memory kept where the backend
      -- can: a microVM's), stop it (memory dropped: the next start boots), or nothing. Replaces the boolean.
      alter table projects add column idle_action text not null default 'pause'
        check (idle_action in ('pause', 'stop', 'none'));
      update projects set idle_action = 'none' where not idle_shutdown;
      alter table projects drop column idle_shutdown;
      -- How a stopped sandbox sleeps, recorded by the operation that stopped it (or dropped its memory):
      -- {"kind": "memory", "bytes", "saved_at"} or {"kind": "files"}; null while it runs.
      alter table tenants add column pause jsonb
    `,
  },
  {
    version: 25,
    name: "last start",
    sql: `
      -- How the sandbox's latest start went, where its backend says (a microVM's): from its kept memory or
      -- from its disks, and why when an image could not be used. {"from", "cold_reason", "at"}.
      alter table tenants add column last_start jsonb
    `,
  },
  {
    version: 26,
    name: "agent turns as sessions, their prompts and commands in the audit",
    sql: `
      -- A turn of the console's chat pane (runtime/api/agent/) is a session of its own: listed with the
      -- terminal's, its recording the turn as the terminal's agent window showed it.
      alter table terminal_sessions add column kind text not null default 'terminal'
        check (kind in ('terminal', 'agent'));
      alter table terminal_audit drop constraint terminal_audit_kind_check;
      alter table terminal_audit add constraint terminal_audit_kind_check
        check (kind in ('input', 'resize', 'truncated', 'agent_prompt', 'agent_command'));
    `,
  },
  {
    version: 27,
    name: "ports the front door does not route when it finds them",
    sql: `
      -- The owner's opt-out of the dev servers found by themselves (runtime/api/front-door/dev-servers.ts):
      -- a JSON array of ports; null is none.
      alter table projects add column private_ports jsonb
    `,
  },
  {
    version: 28,
    name: "users' agent configurations and logins",
    sql: `
      -- Each user's agent settings (runtime/api/agent-config/): files of the agents' config directories by
      -- their path relative to the agent's home, written into the user's new sandboxes.
      create table agent_config_files (
        user_id    uuid not null references users (id) on delete cascade,
        path       text not null,
        content    text not null,
        updated_at timestamptz not null default now(),
        primary key (user_id, path)
      );
      -- Each user's agent logins (subscription OAuth files), sealed with the platform's key as secrets are;
      -- a project opts in with a project secret of kind file (CODEX_LOGIN, ...).
      create table agent_logins (
        user_id    uuid not null references users (id) on delete cascade,
        agent      text not null check (agent in ('claude', 'codex', 'gemini')),
        sealed     text not null,
        updated_at timestamptz not null default now(),
        primary key (user_id, agent)
      );
      -- What the runtime wrote into each project's home: item 'config', or a login's secret name, delivered
      -- or still to be removed (a logout that found the sandbox stopped).
      create table agent_deliveries (
        project_id text not null references tenants (project_id),
        item       text not null,
        state      text not null check (state in ('delivered', 'remove')),
        at         timestamptz not null default now(),
        primary key (project_id, item)
      )
    `,
  },
  {
    version: 29,
    name: "background operations",
    sql: `
      -- Work nobody waits on (the warm pool's own creates and drains): the reconcilers take it after every
      -- other runnable operation (runtime/store/operations.ts, claimOperation).
      alter table operations add column background boolean not null default false
    `,
  },
  {
    version: 30,
    name: "drift checks' vouched basis",
    sql: `
      -- What the engine's last clean refresh of a stack saw (runtime/tenants/drift-basis.ts, DriftBasis):
      -- the checkpoint's digest and each Kubernetes object's uid and resourceVersion. While all of it is
      -- unchanged, the next check needs no engine. Null: nothing vouched (cleared by any finding of drift).
      alter table project_drift add column clean_basis jsonb
    `,
  },
];

export async function migrate(db: Database): Promise<number[]> {
  await db.query(`create table if not exists schema_migrations (
    version integer primary key, name text not null, applied_at timestamptz not null default now())`);
  const applied: number[] = [];
  for (const migration of MIGRATIONS) {
    const done = await db.transaction(async (tx) => {
      // One migrator at a time across processes; a second one waits here and then finds it applied.
      await tx.query("select pg_advisory_xact_lock(727274)");
      const { rows } = await tx.query("select 1 from schema_migrations where version = $1", [
        migration.version,
      ]);
      if (rows.length > 0) return false;
      // One statement per query: the extended protocol (PGlite, parameterised pg) takes no batches.
      for (const statement of migration.sql
        .split(/;\s*\n/)
        .map((part) => part.trim())
        .filter(Boolean)) {
        await tx.query(statement);
      }
      await tx.query("insert into schema_migrations (version, name) values ($1, $2)", [
        migration.version,
        migration.name,
      ]);
      return true;
    });
    if (done) applied.push(migration.version);
  }
  return applied;
}
