-- Foundation: workspaces, members, API keys and the events outbox.
-- Every later table that belongs to a workspace references workspaces(id) ON DELETE CASCADE, so
-- deleting a workspace removes everything inside it in the same transaction.
-- Times are timestamptz(3): millisecond precision, the precision of the API and of list cursors, so
-- a cursor round-trips a row's sort key exactly.

create extension if not exists vector;

create table workspaces (
  id          text primary key,
  name        text not null,
  description text not null default '',
  type        text not null,
  join_policy text not null,
  owner_id    text not null,
  status      text not null default 'active' check (status in ('active', 'archived')),
  created_at  timestamptz(3) not null default now(),
  updated_at  timestamptz(3) not null default now(),
  archived_at timestamptz(3)
);
create index workspaces_created_at_idx on workspaces (created_at, id);
create index workspaces_name_idx on workspaces (name, id);

create table workspace_members (
  workspace_id text not null references workspaces (id) on delete cascade,
  user_id      text not null,
  role         text not null check (role in ('admin', 'developer', 'user', 'readonly')),
  created_at   timestamptz(3) not null default now(),
  updated_at   timestamptz(3) not null default now(),
  primary key (workspace_id, user_id)
);
create index workspace_members_user_idx on workspace_members (user_id, workspace_id);

create table api_keys (
  id           text primary key,
  -- SHA-256 of the whole key; the key itself is never stored.
  key_hash     text not null unique,
  -- The first characters, to tell keys apart in lists ("ap_Xy12").
  prefix       text not null,
  name         text not null,
  user_id      text not null,
  workspace_id text references workspaces (id) on delete cascade,
  role_limit   text check (role_limit in ('admin', 'developer', 'user', 'readonly')),
  is_root      boolean not null default false,
  created_by   text,
  expires_at   timestamptz(3),
  revoked_at   timestamptz(3),
  last_used_at timestamptz(3),
  created_at   timestamptz(3) not null default now()
);
create index api_keys_user_idx on api_keys (user_id, created_at, id);
create index api_keys_workspace_idx on api_keys (workspace_id, created_at, id);

-- The outbox: one row per domain event, written in the transaction of the change it describes, so
-- an event exists if and only if its change committed. Webhook fan-out claims undispatched rows.
create table events (
  id            text primary key,
  workspace_id  text references workspaces (id) on delete cascade,
  type          text not null,
  data          jsonb not null,
  created_at    timestamptz(3) not null default now(),
  dispatched_at timestamptz(3)
);
create index events_undispatched_idx on events (created_at, id) where dispatched_at is null;
create index events_workspace_idx on events (workspace_id, created_at, id);
