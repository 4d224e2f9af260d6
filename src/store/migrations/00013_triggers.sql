-- Workflow triggers: schedules (cron in a time zone) and inbound webhooks (docs/triggers.md).

create table triggers (
  id               text primary key,
  workflow_id      text not null references workflows (id) on delete cascade,
  -- The workflow's workspace, copied so that access checks and lists need no join.
  workspace_id     text not null references workspaces (id) on delete cascade,
  type             text not null check (type in ('schedule', 'webhook')),
  enabled          boolean not null default true,
  -- Schedules only: five cron fields, read in `timezone` (an IANA name).
  cron             text,
  timezone         text,
  -- A schedule's inputs as they are; a webhook's input templates over body, query and headers.
  inputs           jsonb not null default '{}',
  -- Webhooks only, optional: AES-256-GCM under SECRET_KEY (src/lib/secret-box.ts), never returned.
  secret_encrypted text,
  -- The next tick due (null: disabled, a webhook, or a cron that never fires again).
  next_run_at      timestamptz(3),
  last_run_at      timestamptz(3),
  last_run_id      text,
  created_by       text not null,
  created_at       timestamptz(3) not null default now(),
  updated_at       timestamptz(3) not null default now(),
  check ((type = 'schedule') = (cron is not null and timezone is not null))
);
create index triggers_workflow_idx on triggers (workflow_id, created_at, id);
-- The schedule worker's claim: due, enabled schedules, oldest tick first.
create index triggers_due_idx on triggers (next_run_at) where type = 'schedule' and enabled;

-- One row per tick that fired: the primary key is what makes each tick run once, across every
-- process and across a crash (the tick, its run and the next tick commit together).
create table trigger_ticks (
  trigger_id text not null references triggers (id) on delete cascade,
  tick_at    timestamptz(3) not null,
  -- Null when the tick could not start a run (inputs no longer valid for the workflow's graph).
  run_id     text,
  created_at timestamptz(3) not null default now(),
  primary key (trigger_id, tick_at)
);
