-- Workflow definitions (docs/workflows.md). Deleting a workflow deletes it for good, with its versions
-- and (through the runs table's own foreign key) its runs: no soft delete, nothing to filter out.

create table workflows (
  id           text primary key,
  workspace_id text not null references workspaces (id) on delete cascade,
  name         text not null,
  description  text not null default '',
  -- The current graph, checked at save time (src/domain/workflows/graph.ts); also in workflow_versions.
  graph        jsonb not null,
  -- 1 at creation, +1 at every PUT.
  version      integer not null default 1,
  created_by   text not null,
  created_at   timestamptz(3) not null default now(),
  updated_at   timestamptz(3) not null default now()
);
create index workflows_workspace_idx on workflows (workspace_id, created_at, id);

-- Every graph a workflow ever had, so a run (which records its version) can load the exact graph it
-- ran, even after the workflow was replaced.
create table workflow_versions (
  workflow_id text not null references workflows (id) on delete cascade,
  version     integer not null,
  graph       jsonb not null,
  created_at  timestamptz(3) not null default now(),
  primary key (workflow_id, version)
);
