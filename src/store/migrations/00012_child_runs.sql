-- Runs started by other runs (sub_workflow and iteration nodes) and runs waiting for a person's
-- input (human_input nodes): docs/workflows.md, "Sub-workflows and iteration" and "Human input".

-- The run whose node started this one, that node, and the item of an iteration (null: a
-- sub_workflow). One child per (parent, node, item): a worker that re-runs the node after a crash
-- finds the children it started instead of starting them twice.
alter table runs add column parent_run_id text references runs (id) on delete cascade;
alter table runs add column parent_node text;
alter table runs add column item_index integer;
-- How deep in a chain of parents this run is (0: started by a caller, a schedule or a hook).
alter table runs add column depth integer not null default 0;
-- What a waiting run waits on ({ node, prompt, schema, since, expires_at }), else null.
alter table runs add column waiting jsonb;

create unique index runs_child_idx on runs (parent_run_id, parent_node, coalesce(item_index, -1)) where parent_run_id is not null;
