-- Parsing and chunking started and never finished: counted when a document is claimed, before any
-- work (so a process killed mid-parse has counted it), set back to 0 once the document process has
-- answered. A document that reaches MAX_PROCESSING_ATTEMPTS (src/domain/knowledge/ingest.ts) fails
-- as poison_document instead of taking down one worker after another (docs/knowledge.md).
alter table documents add column processing_attempts integer not null default 0;
