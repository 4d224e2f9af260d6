-- Claims are shared fairly between workspaces (src/store/leases.ts, docs/architecture.md "Workers
-- and leases"): a claim finds the workspaces with claimable rows by skipping through this index one
-- workspace at a time, takes each one's oldest rows from it, and counts the rows each one holds
-- already from the second. Ten thousand waiting rows in one workspace cost a claim the few it
-- takes, not a read of all of them.
-- Runs: `depth` beside the workspace, so that top-level runs (held at most RUNS_PER_WORKSPACE at
-- once) and child runs (bounded when they are started) are read apart.
create index runs_fair_claim_idx on runs (workspace_id, depth, created_at) where status = 'running' and wake_at is null;
create index runs_held_idx on runs (workspace_id, lease_until) where status = 'running' and lease_owner is not null;
create index documents_fair_claim_idx on documents (workspace_id, created_at) where status in ('parsing', 'chunking', 'embedding');
create index documents_held_idx on documents (workspace_id, lease_until) where status in ('parsing', 'chunking', 'embedding') and lease_owner is not null;
-- The indexes of the oldest-first claim, which no query reads any more: left in place, the planner
-- took them for a workspace's oldest rows and read every other workspace's rows before them.
drop index if exists runs_claimable_idx;
drop index if exists documents_claimable_idx;
