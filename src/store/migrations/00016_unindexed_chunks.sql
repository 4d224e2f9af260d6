-- The unindexed part of every base (docs/knowledge.md, "Indexing"). New chunks are written here:
-- no vector index to maintain, so a document is ready (searchable, by exact distance) as soon as
-- its chunks are written. A background indexer (src/workers/chunk-indexer.ts) moves the chunks of
-- ready documents into `chunks` (HNSW) in batches, each move one statement (delete here, insert
-- there), so a chunk is in exactly one of the two tables at any time. Search reads both.
create table chunks_unindexed (
  id                text primary key,
  knowledge_base_id text not null references knowledge_bases (id) on delete cascade,
  document_id       text not null references documents (id) on delete cascade,
  generation        integer not null,
  position          integer not null,
  content           text not null,
  heading_path      text[] not null default '{}',
  tokens            integer not null,
  metadata          jsonb not null default '{}',
  dims              integer not null,
  embedding         vector not null,
  -- Computed once at write; full-text search here scans the base's few rows without an index.
  tsv               tsvector generated always as (to_tsvector('english', content)) stored,
  unique (document_id, generation, position)
);
create index chunks_unindexed_kb_idx on chunks_unindexed (knowledge_base_id);

-- `chunks` holds only the chunks of documents' live generations from now on (search reads it without
-- checking); a generation that was being written when the service stopped moves to the unindexed
-- part, where its ingestion resumes.
with stale as (
  delete from chunks c
  where not exists (select 1 from documents d where d.id = c.document_id and d.live_generation = c.generation)
  returning c.id, c.knowledge_base_id, c.document_id, c.generation, c.position, c.content, c.heading_path, c.tokens, c.metadata, c.dims, c.embedding
)
insert into chunks_unindexed (id, knowledge_base_id, document_id, generation, position, content, heading_path, tokens, metadata, dims, embedding)
select * from stale;

-- A 384-dimension vector is 1.5 kB: beside a chunk's text and tsvector the row passes the 2 kB at
-- which PostgreSQL moves its largest value out of line, which was the vector, so every exact
-- distance (the unindexed part, a selective filter) read it back from the TOAST table (~4 µs a
-- row). `main` keeps vectors in the row and moves the text out first (measured: a 1 % filter's
-- search at 100 000 chunks went from 6.6 to 4.0 ms). Rows written from now on.
alter table chunks alter column embedding set storage main;
alter table chunks_unindexed alter column embedding set storage main;
