-- Workflow runs (docs/workflows.md, "Runs"): the run machine's snapshot, leases for the workers that
-- execute them, and the stored event log that streams replay (with Last-Event-ID).

create table runs (
  id               text primary key,
  workflow_id      text not null references workflows (id) on delete cascade,
  workflow_version integer not null,
  workspace_id     text not null references workspaces (id) on delete cascade,
  user_id          text,
  status           text not null check (status in ('running', 'completed', 'failed', 'cancelled')),
  inputs           jsonb not null,
  outputs          jsonb,
  error            jsonb,
  usage            jsonb not null default '{"tokens_in": 0, "tokens_out": 0, "credits": 0}',
  -- The persisted XState snapshot of src/machines/workflow-run.machine.ts, and its version.
  snapshot         jsonb not null,
  machine_version  integer not null,
  -- The worker executing it, until when (heartbeats extend it; an expired lease is taken over).
  lease_owner      text,
  lease_until      timestamptz(3),
  -- A run parked on `wait` nodes: when it may continue.
  wake_at          timestamptz(3),
  -- The next sequence number of run_events.
  next_seq         integer not null default 1,
  request_id       text,
  created_at       timestamptz(3) not null default now(),
  updated_at       timestamptz(3) not null default now(),
  finished_at      timestamptz(3),
  duration_ms      integer
);
create index runs_workflow_idx on runs (workflow_id, created_at, id);
-- The claim query: running runs whose lease is free or expired, due now.
create index runs_claimable_idx on runs (created_at) where status = 'running';

create table run_events (
  run_id     text not null references runs (id) on delete cascade,
  seq        integer not null,
  type       text not null,
  data       jsonb not null,
  created_at timestamptz(3) not null default now(),
  primary key (run_id, seq)
);
