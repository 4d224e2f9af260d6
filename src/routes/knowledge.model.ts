import { t } from 'elysia'
import { iso } from '../lib/time'
import type { DocumentRow, KnowledgeBaseRow } from '../store/knowledge'
import { Id, Name, RequestId, Timestamp } from './common.model'

export const KnowledgeBaseParams = t.Object({ id: Id('kb', 'Knowledge base id') })
export const DocumentParams = t.Object({ document_id: Id('doc', 'Document id') })

const Chunking = t.Object(
  {
    chunk_size: t.Integer({ minimum: 32, maximum: 4096, description: 'Tokens per chunk at most (o200k tokenizer)', examples: [256] }),
    chunk_overlap: t.Integer({ minimum: 0, maximum: 2047, description: 'Tokens shared by consecutive chunks of a section; less than chunk_size / 2', examples: [32] }),
    separators: t.Optional(t.Array(t.String({ maxLength: 16 }), { minItems: 1, maxItems: 16, description: 'Where an over-long paragraph is split, tried in order; "" splits anywhere. Default: paragraph, line, sentence, clause, word' })),
  },
  { additionalProperties: false, description: 'Applies to uploads and re-parses from now on' },
)
const Retrieval = t.Object({ mode: t.UnionEnum(['vector', 'hybrid', 'fulltext'], { description: 'hybrid: reciprocal rank fusion of vector and full-text results' }) }, { additionalProperties: false })
const Description = t.String({ maxLength: 2000 })
const ModelId = (what: string) => t.String({ minLength: 1, maxLength: 128, description: what })

export const CreateKnowledgeBase = t.Object(
  {
    workspace_id: t.Optional(Id('ws', 'The workspace (else X-Workspace-Id, the key\'s workspace or the caller\'s only one)')),
    name: Name,
    description: t.Optional(Description),
    embedding_model: t.Optional(ModelId('An embedding model of GET /v1/models (default local-embed, 384 dimensions)')),
    rerank_model: t.Optional(ModelId('A rerank model, used by searches with rerank: true (default local-rerank)')),
    chunking: t.Optional(Chunking),
    retrieval: t.Optional(Retrieval),
  },
  { additionalProperties: false, examples: [{ name: 'Support articles', chunking: { chunk_size: 256, chunk_overlap: 32 }, retrieval: { mode: 'hybrid' } }] },
)

export const PatchKnowledgeBase = t.Object(
  {
    name: t.Optional(Name),
    description: t.Optional(Description),
    embedding_model: t.Optional(ModelId('A new embedding model: on a base with documents, only with reembed: true')),
    rerank_model: t.Optional(ModelId('A rerank model')),
    chunking: t.Optional(Chunking),
    retrieval: t.Optional(Retrieval),
    reembed: t.Optional(t.Boolean({ description: 'With a new embedding_model: re-index every document (each keeps its old chunks searchable until its swap)' })),
  },
  { additionalProperties: false, examples: [{ retrieval: { mode: 'vector' } }, { embedding_model: 'text-embedding-3-small', reembed: true }] },
)

export const KnowledgeBase = t.Object({
  id: t.String(),
  workspace_id: t.String(),
  name: t.String(),
  description: t.String(),
  embedding_model: t.String(),
  dimensions: t.Integer(),
  rerank_model: t.String(),
  chunking: Chunking,
  retrieval: Retrieval,
  created_by: t.String(),
  created_at: Timestamp,
  updated_at: Timestamp,
})

export function toKnowledgeBase(r: KnowledgeBaseRow): typeof KnowledgeBase.static {
  return {
    id: r.id,
    workspace_id: r.workspace_id,
    name: r.name,
    description: r.description,
    embedding_model: r.embedding_model,
    dimensions: r.dimensions,
    rerank_model: r.rerank_model,
    chunking: r.chunking,
    retrieval: { mode: r.retrieval_mode },
    created_by: r.created_by,
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  }
}

const Status = t.UnionEnum(['uploading', 'parsing', 'chunking', 'embedding', 'ready', 'failed'])
const DocumentError = t.Object({
  code: t.String({
    examples: ['parse_error'],
    description:
      'empty_document, parse_error, unsupported_type, embedding_failed, budget_exceeded, ingestion_failed, original_missing, storage_unavailable, ' +
      'processing_timeout (parsing and chunking over 60 s), processing_memory (over 640 MiB), too_many_chunks (over 20 000), ' +
      'poison_document (reading it never finished three times); docs/knowledge.md "Statuses"',
  }),
  message: t.String(),
})

export const TextUpload = t.Object(
  {
    type: t.Literal('text'),
    name: t.String({ minLength: 1, maxLength: 255, description: 'A name ending in .md is parsed as Markdown; anything else as plain text' }),
    content: t.String({ description: 'The text (the JSON body is at most MAX_JSON_BYTES)' }),
    metadata: t.Optional(t.Record(t.String(), t.Unknown(), { description: 'Free-form key/value pairs, copied to every chunk and usable as search filters' })),
    group: t.Optional(t.String({ maxLength: 64 })),
  },
  { additionalProperties: false, examples: [{ type: 'text', name: 'returns.md', content: '# Returns\n\nItems may be returned within 30 days.', metadata: { topic: 'returns' } }] },
)

/** The upload answer, flat: no `data` envelope (docs/knowledge.md, "Documents"). */
export const Uploaded = t.Object({
  request_id: RequestId,
  document_id: t.String(),
  name: t.String(),
  size_bytes: t.Integer(),
  status: Status,
  created_at: Timestamp,
})

export const uploaded = (requestId: string, d: DocumentRow): typeof Uploaded.static => ({
  request_id: requestId,
  document_id: d.id,
  name: d.name,
  size_bytes: Number(d.size_bytes),
  status: d.status,
  created_at: iso(d.created_at)!,
})

/** The status answer, flat: no `data` envelope (docs/knowledge.md, "Documents"). */
export const DocumentStatus = t.Object({
  request_id: RequestId,
  id: t.String(),
  status: Status,
  chunks_count: t.Integer({ description: 'Chunks searchable now' }),
  indexed_at: t.Union([Timestamp, t.Null()], { description: 'When the searchable chunks were indexed (null before the first ready)' }),
})

export const documentStatus = (requestId: string, d: DocumentRow): typeof DocumentStatus.static => ({
  request_id: requestId,
  id: d.id,
  status: d.status,
  chunks_count: d.chunks_count,
  indexed_at: iso(d.indexed_at),
})

/** A document in lists and management answers: everything, including why it failed. */
export const Document = t.Object({
  id: t.String(),
  knowledge_base_id: t.String(),
  name: t.String(),
  type: t.String({ description: 'txt, md, html, pdf, docx, csv or json' }),
  group: t.Union([t.String(), t.Null()]),
  size_bytes: t.Integer(),
  metadata: t.Record(t.String(), t.Unknown()),
  status: Status,
  error: t.Union([DocumentError, t.Null()]),
  chunks_count: t.Integer(),
  indexed_at: t.Union([Timestamp, t.Null()]),
  created_at: Timestamp,
  updated_at: Timestamp,
})

export function toDocument(d: DocumentRow): typeof Document.static {
  return {
    id: d.id,
    knowledge_base_id: d.knowledge_base_id,
    name: d.name,
    type: d.doc_type,
    group: d.group,
    size_bytes: Number(d.size_bytes),
    metadata: d.metadata,
    status: d.status,
    error: d.error,
    chunks_count: d.chunks_count,
    indexed_at: iso(d.indexed_at),
    created_at: iso(d.created_at)!,
    updated_at: iso(d.updated_at)!,
  }
}

export const SearchBody = t.Object(
  {
    query: t.String({ minLength: 1, maxLength: 8000 }),
    top_k: t.Optional(t.Integer({ minimum: 1, maximum: 100, description: 'Default 5; large values add noise' })),
    filters: t.Optional(t.Record(t.String(), t.Unknown(), { description: 'Metadata key → value (exact), or → array of values (any of)' })),
    rerank: t.Optional(t.Boolean({ description: 'Rerank a wider candidate pool with the base\'s rerank model; score is then the rerank score' })),
  },
  { additionalProperties: false, examples: [{ query: 'How long do refunds take?', top_k: 5, filters: { topic: ['billing', 'returns'] }, rerank: false }] },
)

export const SearchResults = t.Object({
  request_id: RequestId,
  results: t.Array(
    t.Object({
      chunk_id: t.String(),
      document_id: t.String(),
      document_name: t.String(),
      content: t.String(),
      score: t.Number({ description: 'The number the results are ordered by (descending), in [0, 1]: cosine similarity in vector mode, the normalised fused rank in hybrid and full-text modes, the rerank score with rerank: true' }),
      similarity: t.Number({ description: 'Cosine similarity to the query in [0, 1], in every mode' }),
      metadata: t.Record(t.String(), t.Unknown()),
    }),
  ),
})
