-- Webhooks and their deliveries (docs/webhooks.md).

create table webhooks (
  id                        text primary key,
  workspace_id              text not null references workspaces (id) on delete cascade,
  url                       text not null,
  events                    text[] not null,
  -- AES-256-GCM under SECRET_KEY (src/lib/secret-box.ts); the plain secret is never stored.
  secret_encrypted          text not null,
  -- After a rotation the old secret signs beside the new one until previous_secret_expires_at.
  previous_secret_encrypted text,
  previous_secret_expires_at timestamptz(3),
  enabled                   boolean not null default true,
  disabled_reason           text,
  -- Start of the current run of failed deliveries (null after any success): 5 days of it disables.
  failing_since             timestamptz(3),
  created_by                text not null,
  created_at                timestamptz(3) not null default now(),
  updated_at                timestamptz(3) not null default now()
);
create index webhooks_workspace_idx on webhooks (workspace_id, created_at, id);

create table webhook_deliveries (
  id              text primary key,
  -- Belongs to its webhook's workspace; deleting either deletes it (through the webhook).
  webhook_id      text not null references webhooks (id) on delete cascade,
  -- No foreign key to events: the outbox is pruned independently of delivery records.
  event_id        text not null,
  event_type      text not null,
  data            jsonb not null,
  -- The API status (pending, retrying, succeeded, failed), derived from the machine at every save.
  status          text not null check (status in ('pending', 'retrying', 'succeeded', 'failed')),
  -- The persisted XState snapshot of src/machines/webhook-delivery.machine.ts, and its version.
  snapshot        jsonb not null,
  machine_version integer not null,
  -- Attempts made over the delivery's whole life (redeliveries continue the count).
  attempts_count  integer not null default 0,
  attempts        jsonb not null default '[]',
  -- When the delivery next needs a worker (its timer); null once settled. Timers are rebuilt from it.
  next_attempt_at timestamptz(3),
  created_at      timestamptz(3) not null default now(),
  updated_at      timestamptz(3) not null default now(),
  -- One delivery per (event, webhook), whatever number of fan-out workers run.
  unique (event_id, webhook_id)
);
-- Every update of a delivery changes status and next_attempt_at, so none is a HOT update and each
-- index costs a write per transition: three indexes are maintained for every row, the two partial
-- ones only while a delivery is open or once it failed (measured on PGlite: 7 indexes made an insert
-- cost 0.10 ms a row, see bench/README.md). Retention deletes by id: ids are time-ordered ULIDs.
create index webhook_deliveries_webhook_idx on webhook_deliveries (webhook_id, created_at, id);
create index webhook_deliveries_failed_idx on webhook_deliveries (webhook_id, created_at, id) where status = 'failed';
-- Open deliveries (pending, retrying, in flight): listing them, and re-arming their timers.
create index webhook_deliveries_open_idx on webhook_deliveries (webhook_id, created_at, id) where next_attempt_at is not null;

