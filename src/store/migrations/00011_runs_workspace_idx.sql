-- GET /v1/runs lists the runs of whole workspaces (docs/api.md, "Lists"): the same
-- (workspace_id, created_at, id) index every other workspace list has, so a page is an index range
-- per workspace, not a scan of every run.
create index runs_workspace_idx on runs (workspace_id, created_at, id);
