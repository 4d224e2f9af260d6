-- Credits (docs/models.md, "Credits and budgets"): every model call's usage, priced, in a ledger; budgets per
-- workspace and period with their thresholds.

create table credit_ledger (
  id           text primary key,
  workspace_id text not null references workspaces (id) on delete cascade,
  model        text not null,
  kind         text not null check (kind in ('chat', 'embedding', 'rerank')),
  tokens_in    integer not null check (tokens_in >= 0),
  tokens_out   integer not null check (tokens_out >= 0),
  -- numeric: sums of many small prices must not drift as floats would.
  credits      numeric(20, 6) not null check (credits >= 0),
  request_id   text,
  created_at   timestamptz(3) not null default now()
);
create index credit_ledger_workspace_idx on credit_ledger (workspace_id, created_at);

create table workspace_budgets (
  workspace_id text primary key references workspaces (id) on delete cascade,
  credits      numeric(20, 6) not null check (credits > 0),
  period       text not null check (period = 'month'),
  thresholds   integer[] not null,
  hard_limit   boolean not null,
  updated_at   timestamptz(3) not null default now()
);

-- The running total of a period: one row per workspace and month, updated in place so that
-- concurrent charges serialise on its row lock (exact under concurrency), with the thresholds whose
-- event was already emitted in this period (once per threshold per period).
create table credit_periods (
  workspace_id     text not null references workspaces (id) on delete cascade,
  period_start     date not null,
  used             numeric(20, 6) not null default 0,
  thresholds_fired integer[] not null default '{}',
  primary key (workspace_id, period_start)
);
