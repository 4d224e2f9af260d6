-- The W3C trace context (docs/observability.md) of the request that created work another process
-- picks up: a run, a document's ingestion, an outbox event and the webhook deliveries it fans out
-- to. The worker's spans are its children, so one trace follows the work across processes. Null
-- with tracing off (nothing is stored, nothing is read).
alter table runs add column trace_context jsonb;
alter table documents add column trace_context jsonb;
alter table events add column trace_context jsonb;
alter table webhook_deliveries add column trace_context jsonb;
