-- Claims are shared fairly between workspaces (src/store/leases.ts, docs/architecture.md "Workers
-- and leases"): a claim finds the workspaces with claimable rows by skipping through the first index
-- one workspace at a time, takes each one's oldest rows from it, and counts the rows each one holds
-- already from the second. Ten thousand waiting rows in one workspace cost a claim the few it
-- takes, not a read of all of them.
create index runs_fair_claim_idx on runs (workspace_id, created_at) where status = 'running' and wake_at is null;
create index runs_held_idx on runs (workspace_id) where status = 'running' and lease_owner is not null;
-- Whether a held run waits on children (it then takes no place in its workspace's share), one probe.
create index runs_running_children_idx on runs (parent_run_id) where status = 'running' and parent_run_id is not null;
-- The child runs of a workspace running and not parked: what CHILD_RUNS_PER_WORKSPACE bounds.
create index runs_children_working_idx on runs (workspace_id) where status = 'running' and wake_at is null and parent_run_id is not null;
create index documents_fair_claim_idx on documents (workspace_id, created_at) where status in ('parsing', 'chunking', 'embedding');
create index documents_held_idx on documents (workspace_id) where status in ('parsing', 'chunking', 'embedding') and lease_owner is not null;
-- The indexes of the oldest-first claim, which no query reads any more: left in place, the planner
-- took them for a workspace's oldest rows and read every other workspace's rows before them.
drop index if exists runs_claimable_idx;
drop index if exists documents_claimable_idx;
