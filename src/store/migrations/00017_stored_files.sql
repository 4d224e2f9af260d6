-- Uploaded originals kept in the database (STORAGE_URL=postgres:, the server-mode default;
-- docs/deployment.md, "Where uploaded files live"), so processes on different hosts share nothing
-- but PostgreSQL and Redis. A file is a row and its bytes in 1 MiB parts: a 50 MB upload is never
-- one parameter or one buffer. Parts are written first under a row that is not `complete`; one
-- transaction then marks it complete (replacing an older file of the key), so a reader sees the
-- whole file or none. Rows left incomplete by a process that died are swept after an hour.
create table stored_files (
  id text primary key,
  key text not null,
  size bigint,
  sha256 text,
  complete boolean not null default false,
  created_at timestamptz not null default now()
);
create unique index stored_files_key_idx on stored_files (key) where complete;
create index stored_files_key_prefix_idx on stored_files (key collate "C");
create index stored_files_incomplete_idx on stored_files (created_at) where not complete;

create table stored_file_parts (
  file_id text not null references stored_files (id) on delete cascade,
  n integer not null,
  data bytea not null,
  primary key (file_id, n)
);
