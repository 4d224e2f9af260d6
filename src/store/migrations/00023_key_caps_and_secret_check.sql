-- A key issued for another member of a workspace took its issuer's role as its role_limit (an admin's
-- key for a developer said 'admin'; the owner's said nothing), so promoting the member later raised
-- the key. Keys are now capped at their member's role when issued; the keys issued before are capped
-- at their member's role as it is now, the nearest to that which is known.
update api_keys k
set role_limit = m.role
from workspace_members m, workspaces w
where m.workspace_id = k.workspace_id and m.user_id = k.user_id and w.id = k.workspace_id
  and not k.is_root and k.revoked_at is null
  and k.issued_by is not null and k.issued_by <> k.user_id and k.issued_by <> 'root'
  and w.owner_id <> k.user_id
  and (k.role_limit is null
       or array_position(array['readonly', 'user', 'developer', 'admin'], k.role_limit)
          > array_position(array['readonly', 'user', 'developer', 'admin'], m.role));

-- A known text sealed under SECRET_KEY by the first process that starts on this database: every later
-- process opens it before serving, so one started with another SECRET_KEY is refused at start-up
-- instead of failing to open webhook, trigger and MCP header secrets one request at a time.
create table secret_key_check (
  id         boolean primary key default true check (id),
  sealed     text not null,
  created_at timestamptz not null default now()
);
