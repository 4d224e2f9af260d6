-- The audit trail (docs/audit.md): one row per successful write through the API, with who made it (the
-- caller's user_id and API key), what (method and route, the resource), when and the request id.
-- A workspace's trail goes with it (as all its data does); the deletion itself is recorded with
-- workspace_id null (and the workspace's id in params), so it outlives the workspace.
create table audit_log (
  id            text primary key,
  workspace_id  text references workspaces (id) on delete cascade,
  user_id       text not null,
  api_key_id    text not null,
  -- "<METHOD> <route>", e.g. "DELETE /v1/documents/{document_id}".
  action        text not null,
  -- The resource the write created or acted on (the route's last id, or the id the answer created).
  resource_id   text,
  -- The route's path parameters, as sent.
  params        jsonb not null default '{}',
  status        integer not null,
  request_id    text not null,
  created_at    timestamptz(3) not null default now()
);
create index audit_log_workspace_idx on audit_log (workspace_id, created_at, id);
