import { Value } from '@sinclair/typebox/value'
import { Elysia, t } from 'elysia'
import type { Deps } from '../deps'
import * as bases from '../domain/knowledge/bases'
import * as documents from '../domain/knowledge/documents'
import { searchKnowledgeBase } from '../domain/knowledge/search'
import { resolveWorkspaceId } from '../domain/ownership'
import { invalid } from '../lib/errors'
import { parseListQuery, toPage, type ListSpec } from '../lib/lists'
import { Described, Envelope, envelope, errors, ListOf, ListQuery } from './common.model'
import {
  CreateKnowledgeBase, Document, DocumentParams, DocumentStatus, documentStatus, KnowledgeBase, KnowledgeBaseParams, PatchKnowledgeBase, SearchBody,
  SearchResults, TextUpload, toDocument, toKnowledgeBase, Uploaded, uploaded,
} from './knowledge.model'
import { authenticated } from './plugins/auth'
import { writeKey } from './plugins/idempotency'
import { STREAMED_BODY } from './plugins/bodies'

const baseList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time', name: 'text' },
  filters: { created_at: { type: 'time' }, name: { type: 'text' } },
  extra: ['workspace_id'],
}
const documentList: ListSpec = {
  sortable: { created_at: 'time', updated_at: 'time', name: 'text' },
  filters: {
    status: { type: 'text', values: ['uploading', 'parsing', 'chunking', 'embedding', 'ready', 'failed'] },
    group: { type: 'text' },
    created_at: { type: 'time' },
    name: { type: 'text' },
  },
}
const tags = ['knowledge']

/** The JSON text upload, checked here: the route's body is either this or a multipart stream. */
function textUpload(body: unknown) {
  const first = Value.Errors(TextUpload, body).First()
  if (first) throw invalid(first.path.slice(1).replaceAll('/', '.') || 'body', first.message)
  return body as typeof TextUpload.static
}

/** The one instance every knowledge route is added to, authenticated (src/routes/plugins/auth.ts). */
const knowledgeApp = (deps: Deps) => new Elysia({ name: 'routes.knowledge' }).use(authenticated(deps))
type KnowledgeApp = ReturnType<typeof knowledgeApp>

/**
 * Knowledge bases, their documents and their search. The groups below are functions of the one
 * instance (Elysia's functional plugins): their routes are added to it in this order, under the
 * same hooks, as one chain would add them.
 */
export function knowledgeRoutes(deps: Deps) {
  return knowledgeApp(deps).use(baseRoutes(deps)).use(documentRoutes(deps)).use(searchRoutes(deps))
}

/** Knowledge bases: create, list, read, change, delete. */
function baseRoutes(deps: Deps) {
  return (app: KnowledgeApp) => app
    .post('/knowledge-bases', async ({ caller, requestId, body, headers, set, request }) => {
      const workspaceId = await resolveWorkspaceId(deps, caller, body.workspace_id, headers['x-workspace-id'])
      set.status = 201
      return envelope(requestId, toKnowledgeBase(await bases.createKnowledgeBase(deps, caller, { ...body, workspace_id: workspaceId }, writeKey(request))))
    }, {
      body: CreateKnowledgeBase,
      parse: 'json',
      response: { 201: Envelope(KnowledgeBase, 'The knowledge base created'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'createKnowledgeBase', tags, summary: 'Create a knowledge base (developer)', description: 'Defaults: local-embed (384 dimensions), local-rerank, chunk_size 256 / chunk_overlap 32 tokens, hybrid retrieval. See docs/knowledge.md.' },
    })
    .get('/knowledge-bases', async ({ caller, requestId, query, headers }) => {
      const q = parseListQuery(query, baseList)
      const workspaceId = (query as { workspace_id?: string }).workspace_id ?? headers['x-workspace-id']
      return { request_id: requestId, ...toPage(await bases.listKnowledgeBases(deps, caller, workspaceId, q), q, toKnowledgeBase) }
    }, {
      query: ListQuery('created_at, updated_at, name', {
        workspace_id: t.Optional(t.String({ description: 'Only this workspace (else X-Workspace-Id); without either, every workspace the caller can read. One the caller cannot read is 404' })),
        name: t.Optional(t.String()),
        created_at_after: t.Optional(t.String()),
        created_at_before: t.Optional(t.String()),
      }),
      response: { 200: ListOf(KnowledgeBase, 'A page of knowledge bases'), ...errors(403, 404) },
      detail: { operationId: 'listKnowledgeBases', tags, summary: 'List the knowledge bases of every workspace the caller can read (workspace_id: of one)' },
    })
    .get('/knowledge-bases/:id', async ({ caller, requestId, params }) => envelope(requestId, toKnowledgeBase(await bases.loadKnowledgeBase(deps, caller, params.id, 'read'))), {
      params: KnowledgeBaseParams,
      response: { 200: Envelope(KnowledgeBase, 'The knowledge base'), ...errors(404) },
      detail: { operationId: 'getKnowledgeBase', tags, summary: 'Get a knowledge base' },
    })
    .patch('/knowledge-bases/:id', async ({ caller, requestId, params, body }) => envelope(requestId, toKnowledgeBase(await bases.updateKnowledgeBase(deps, caller, params.id, body))), {
      params: KnowledgeBaseParams,
      body: PatchKnowledgeBase,
      parse: 'json',
      response: { 200: Envelope(KnowledgeBase, 'The knowledge base as changed'), ...errors(403, 404, 409, 422) },
      detail: {
        operationId: 'updateKnowledgeBase',
        tags,
        summary: 'Change a knowledge base (developer)',
        description: 'A new embedding_model on a base with documents needs reembed: true (409 conflict otherwise): every document is re-embedded as a new generation, its old chunks searchable until the swap. Chunking applies to uploads and re-parses from now on.',
      },
    })
    .delete('/knowledge-bases/:id', async ({ caller, requestId, params }) => {
      await bases.deleteKnowledgeBase(deps, caller, params.id)
      return envelope(requestId, { id: params.id, deleted: true as const })
    }, {
      params: KnowledgeBaseParams,
      response: { 200: Envelope(t.Object({ id: t.String(), deleted: t.Literal(true) }), 'The knowledge base was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteKnowledgeBase', tags, summary: 'Delete a knowledge base with its documents, chunks and originals (developer)' },
    })
}

/** A base's documents (upload, list) and a document by id (status, delete, re-parse). */
function documentRoutes(deps: Deps) {
  return (app: KnowledgeApp) => app
    .post('/knowledge-bases/:id/documents', async ({ caller, requestId, params, request, body, set }) => {
      const doc = body === STREAMED_BODY
        ? await documents.uploadFile(deps, caller, params.id, request, writeKey(request))
        : await documents.uploadText(deps, caller, params.id, textUpload(body), writeKey(request))
      set.status = 201
      return uploaded(requestId, doc)
    }, {
      params: KnowledgeBaseParams,
      response: { 201: Described(Uploaded, 'The document accepted; its ingestion runs in the background'), ...errors(403, 404, 409, 413, 415, 422) },
      detail: {
        operationId: 'uploadDocument',
        tags,
        summary: 'Upload a document: multipart/form-data (file, group, metadata as a JSON string) or JSON { type: "text", name, content, metadata }',
        description: 'The file streams to storage (at most MAX_UPLOAD_BYTES, else 413); .txt .md .markdown .html .htm .pdf .docx .csv .json, checked against the content (else 415). Answers 201 with status parsing; GET /v1/documents/{id} follows the ingestion, and knowledge.document.ready | failed are sent to webhooks.',
        requestBody: {
          content: {
            'multipart/form-data': {
              schema: { type: 'object', required: ['file'], properties: { file: { type: 'string', format: 'binary' }, group: { type: 'string', maxLength: 64 }, metadata: { type: 'string', description: 'A JSON object, serialized' } } },
            },
            'application/json': { schema: TextUpload },
          },
        },
      },
    })
    .get('/knowledge-bases/:id/documents', async ({ caller, requestId, params, query }) => {
      const q = parseListQuery(query, documentList)
      return { request_id: requestId, ...toPage(await documents.listDocuments(deps, caller, params.id, q), q, toDocument) }
    }, {
      params: KnowledgeBaseParams,
      query: ListQuery('created_at, updated_at, name', {
        status: t.Optional(t.String({ description: 'uploading, parsing, chunking, embedding, ready or failed; status_in=a,b for several' })),
        group: t.Optional(t.String({ description: 'Only documents uploaded with this group' })),
        name: t.Optional(t.String()),
        created_at_after: t.Optional(t.String()),
        created_at_before: t.Optional(t.String()),
      }),
      response: { 200: ListOf(Document, 'A page of documents'), ...errors(404) },
      detail: { operationId: 'listDocuments', tags, summary: 'List the documents of a knowledge base, with their status and error' },
    })
    .get('/documents/:document_id', async ({ caller, requestId, params }) => documentStatus(requestId, await documents.loadDocument(deps, caller, params.document_id, 'read')), {
      params: DocumentParams,
      response: { 200: Described(DocumentStatus, 'The document\'s status'), ...errors(404) },
      detail: { operationId: 'getDocument', tags, summary: 'A document\'s status: { id, status, chunks_count, indexed_at } (the list shows its error when failed)' },
    })
    .delete('/documents/:document_id', async ({ caller, requestId, params }) => envelope(requestId, { ...toDocument(await documents.deleteDocument(deps, caller, params.document_id)), deleted: true as const }), {
      params: DocumentParams,
      response: { 200: Envelope(t.Composite([Document, t.Object({ deleted: t.Literal(true) })]), 'The document was deleted'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'deleteDocument', tags, summary: 'Delete a document with its chunks and original, also during its ingestion (which stops) (developer)' },
    })
    .post('/documents/:document_id/reparse', async ({ caller, requestId, params, set }) => {
      const doc = await documents.reparseDocument(deps, caller, params.document_id)
      set.status = 202
      return envelope(requestId, toDocument(doc))
    }, {
      params: DocumentParams,
      response: { 202: Envelope(Document, 'The document, queued for parsing again'), ...errors(403, 404, 409, 422) },
      detail: { operationId: 'reparseDocument', tags, summary: 'Re-parse a ready or failed document with the base\'s current chunking (409 otherwise); its chunks stay searchable until the new ones replace them (developer)' },
    })
}

/** The search of one base (retrieval only). */
function searchRoutes(deps: Deps) {
  return (app: KnowledgeApp) => app
    .post('/knowledge-bases/:id/search', async ({ caller, requestId, params, body, request }) => ({
      request_id: requestId,
      results: await searchKnowledgeBase(deps, caller, params.id, body, requestId, request.signal),
    }), {
      params: KnowledgeBaseParams,
      body: SearchBody,
      parse: 'json',
      response: { 200: Described(SearchResults, 'The passages found, best first'), ...errors(402, 404, 422) },
      detail: { operationId: 'searchKnowledgeBase', tags, summary: 'Search a knowledge base: vector, full-text or hybrid per its retrieval mode; filters on metadata; optional rerank. Retrieval only, no generation.' },
    })
}
