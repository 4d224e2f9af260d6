-- Knowledge bases (docs/knowledge.md): documents ingested by the document machine
-- (src/machines/document.machine.ts) into chunks searched through pgvector and full-text search.

create table knowledge_bases (
  id              text primary key,
  workspace_id    text not null references workspaces (id) on delete cascade,
  name            text not null,
  description     text not null default '',
  -- An embedding model of the catalogue, and its dimensions when the base was (re)configured.
  embedding_model text not null,
  dimensions      integer not null,
  -- { chunk_size, chunk_overlap, separators? } in tokens (src/domain/knowledge/chunk.ts).
  chunking        jsonb not null,
  retrieval_mode  text not null check (retrieval_mode in ('vector', 'hybrid', 'fulltext')),
  -- A rerank model of the catalogue, used when a search asks for `rerank: true`.
  rerank_model    text not null,
  created_by      text not null,
  created_at      timestamptz(3) not null default now(),
  updated_at      timestamptz(3) not null default now()
);
create index knowledge_bases_workspace_idx on knowledge_bases (workspace_id, created_at, id);

create table documents (
  id                text primary key,
  knowledge_base_id text not null references knowledge_bases (id) on delete cascade,
  workspace_id      text not null references workspaces (id) on delete cascade,
  name              text not null,
  doc_type          text not null,
  "group"           text,
  size_bytes        bigint not null,
  sha256            text not null,
  metadata          jsonb not null default '{}',
  status            text not null check (status in ('uploading', 'parsing', 'chunking', 'embedding', 'ready', 'failed')),
  error             jsonb,
  -- The persisted XState snapshot of the document machine, and its version.
  snapshot          jsonb not null,
  machine_version   integer not null,
  -- The worker ingesting it, until when (heartbeats extend it; an expired lease is taken over).
  lease_owner       text,
  lease_until       timestamptz(3),
  -- How many times a worker took it up; a document whose ingestion keeps killing its worker fails.
  attempts          integer not null default 0,
  -- The generation being built (1, then +1 at each reparse or re-embed), and the one searched:
  -- chunks of other generations are invisible, so a reparse swaps in its chunks at once.
  generation        integer not null default 1,
  live_generation   integer,
  chunks_count      integer not null default 0,
  indexed_at        timestamptz(3),
  created_by        text not null,
  created_at        timestamptz(3) not null default now(),
  updated_at        timestamptz(3) not null default now()
);
create index documents_kb_idx on documents (knowledge_base_id, created_at, id);
-- The claim query: documents being ingested.
create index documents_claimable_idx on documents (created_at) where status in ('parsing', 'chunking', 'embedding');

create table chunks (
  id                text primary key,
  knowledge_base_id text not null references knowledge_bases (id) on delete cascade,
  document_id       text not null references documents (id) on delete cascade,
  generation        integer not null,
  position          integer not null,
  content           text not null,
  heading_path      text[] not null default '{}',
  tokens            integer not null,
  -- The document's metadata, copied: filters apply inside the index scan.
  metadata          jsonb not null default '{}',
  -- Bases may use models of different sizes: the column is untyped, and each size has its own partial
  -- HNSW index on embedding::vector(<dims>) where dims = <dims> (created when a base of a new size is).
  dims              integer not null,
  embedding         vector not null,
  tsv               tsvector generated always as (to_tsvector('english', content)) stored,
  unique (document_id, generation, position)
);
create index chunks_kb_idx on chunks (knowledge_base_id);
-- A GIN index's pending list (fast inserts) is scanned in full by every search until it is merged,
-- and PGlite runs no autovacuum: a small list (256 kB instead of 4 MB) keeps inserts batched and
-- searches short. Metadata has few keys per chunk: its entries go straight into the index.
create index chunks_tsv_idx on chunks using gin (tsv) with (gin_pending_list_limit = 256);
create index chunks_metadata_idx on chunks using gin (metadata jsonb_path_ops) with (fastupdate = off);
-- local-embed, the default model: 384 dimensions.
create index chunks_hnsw_384_idx on chunks using hnsw ((embedding::vector(384)) vector_cosine_ops) where dims = 384;
