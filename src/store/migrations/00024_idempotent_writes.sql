-- The row a write made under an Idempotency-Key created, recorded in the same transaction as that
-- row (src/store/idempotent-writes.ts). The answer a retry replays lives in Redis (or the embedded
-- stand-in's journal) and is written after the commit; a process killed in between leaves the row
-- without a stored answer, and this record is how a retry finds it and answers from it instead of
-- creating a second one. The primary key is what makes a second execution under the same key fail
-- (and roll back) rather than create anything. Kept 24 h, as the stored answers are.
create table idempotent_writes (
  -- who the key belongs to: the API key's id, or `hook:<trigger id>` for a webhook trigger's calls
  scope text not null,
  -- sha256 of the Idempotency-Key (the key itself is the client's and is not stored)
  key_hash text not null,
  -- the request's fingerprint: method, path, query and body
  fingerprint text not null,
  -- what was created: workspace, member, api_key, workflow, run, trigger, webhook, knowledge_base, document, agent
  kind text not null,
  resource_id text not null,
  -- an API key's secret, sealed under SECRET_KEY: the one field a retry cannot read back from the row
  sealed text,
  created_at timestamptz not null default now(),
  primary key (scope, key_hash)
);
create index idempotent_writes_created_at_idx on idempotent_writes (created_at);
