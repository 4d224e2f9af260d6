import type { Deps } from '../../deps'
import { AppError, invalid } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import * as store from '../../store/knowledge'
import type { Action, Caller } from '../access'
import { access, listScope, loadOwned } from '../ownership'
import { DEFAULT_CHUNKING } from './chunk'
import { requeueAllIn } from './document-transitions'
import { accessChanged, changingAccess } from '../../store/access-generation'
import type { WriteKey } from '../../store/idempotent-writes'

export const DEFAULT_EMBEDDING_MODEL = 'local-embed'
export const DEFAULT_RERANK_MODEL = 'local-rerank'
export const DEFAULT_RETRIEVAL_MODE: store.RetrievalMode = 'hybrid'

export interface KnowledgeBaseInput {
  workspace_id: string
  name: string
  description?: string
  embedding_model?: string
  rerank_model?: string
  chunking?: store.Chunking
  retrieval?: { mode: store.RetrievalMode }
}

export interface KnowledgeBasePatchInput extends Partial<Omit<KnowledgeBaseInput, 'workspace_id'>> {
  /** Re-embed every document with the new embedding model (required to change it on a non-empty base). */
  reembed?: boolean
}

/** A base the caller may take `action` on; another workspace's answers 404. */
export function loadKnowledgeBase(deps: Deps, caller: Caller, id: string, action: Action): Promise<store.KnowledgeBaseRow> {
  return loadOwned(deps, caller, 'knowledge base', id, action, store.findKnowledgeBase)
}

/** A model of the catalogue, its errors naming the request's field (`embedding_model`, `rerank_model`). */
function modelFor(deps: Deps, id: string, type: 'embedding' | 'rerank', field: string) {
  try {
    return deps.models.model(id, type)
  } catch (err) {
    if (!(err instanceof AppError)) throw err
    const message = err.message
    throw new AppError(err.code, `${field}: ${message}`, { param: field, ...(err.code === 'validation_error' ? { details: [{ path: field, message }] } : {}) })
  }
}

/** An embedding model of the catalogue whose vectors an HNSW index can hold (≤ 2 000 dimensions). */
function embeddingModel(deps: Deps, id: string) {
  const model = modelFor(deps, id, 'embedding', 'embedding_model')
  if (!model.dimensions || model.dimensions > 2000) {
    const message = `model ${id} has ${model.dimensions} dimensions; knowledge bases index at most 2000`
    throw new AppError('validation_error', `embedding_model: ${message}`, { param: 'embedding_model', details: [{ path: 'embedding_model', message }] })
  }
  return model
}

/** A base's `chunking` (docs/knowledge.md, "Knowledge bases"): chunk_size 32..4096 tokens, 0 ≤ chunk_overlap < chunk_size / 2. */
function checkChunking(c: store.Chunking): store.Chunking {
  if (c.chunk_overlap * 2 >= c.chunk_size) throw invalid('chunking.chunk_overlap', `must be less than half of chunk_size (${c.chunk_size})`)
  return c.separators === undefined ? { chunk_size: c.chunk_size, chunk_overlap: c.chunk_overlap } : { ...c }
}

export async function createKnowledgeBase(deps: Deps, caller: Caller, input: KnowledgeBaseInput, key?: WriteKey): Promise<store.KnowledgeBaseRow> {
  await access(deps, caller, input.workspace_id, 'build')
  const embedding = embeddingModel(deps, input.embedding_model ?? DEFAULT_EMBEDDING_MODEL)
  const rerank = modelFor(deps, input.rerank_model ?? DEFAULT_RERANK_MODEL, 'rerank', 'rerank_model')
  const chunking = checkChunking(input.chunking ?? DEFAULT_CHUNKING)
  await store.ensureVectorIndex(deps.db.sql, embedding.dimensions!)
  return store.insertKnowledgeBase(deps.db.sql, {
    id: newId('kb'),
    workspace_id: input.workspace_id,
    name: input.name,
    description: input.description ?? '',
    embedding_model: embedding.id,
    dimensions: embedding.dimensions!,
    chunking,
    retrieval_mode: input.retrieval?.mode ?? DEFAULT_RETRIEVAL_MODE,
    rerank_model: rerank.id,
    created_by: caller.userId,
  }, key)
}

/** Every workspace the caller can read, or the one named (docs/api.md, "Lists"). */
export async function listKnowledgeBases(deps: Deps, caller: Caller, workspaceId: string | undefined, q: ListQuery) {
  return store.listKnowledgeBases(deps.db.sql, await listScope(deps, caller, workspaceId), q)
}

/**
 * PATCH: the fields given are replaced. A new embedding model makes every stored vector
 * incomparable with the queries': on a base with documents it needs `reembed: true` (409
 * otherwise), which re-indexes every document as a new generation (the old chunks stay searchable,
 * with the old model's vectors, until each document's swap). Chunking applies to uploads and reparses
 * from now on.
 */
export async function updateKnowledgeBase(deps: Deps, caller: Caller, id: string, input: KnowledgeBasePatchInput): Promise<store.KnowledgeBaseRow> {
  const current = await loadKnowledgeBase(deps, caller, id, 'build')
  const patch: store.KnowledgeBasePatch = {}
  if (input.name !== undefined) patch.name = input.name
  if (input.description !== undefined) patch.description = input.description
  if (input.rerank_model !== undefined) patch.rerank_model = modelFor(deps, input.rerank_model, 'rerank', 'rerank_model').id
  if (input.chunking !== undefined) patch.chunking = checkChunking(input.chunking)
  if (input.retrieval !== undefined) patch.retrieval_mode = input.retrieval.mode
  const modelChange = input.embedding_model !== undefined && input.embedding_model !== current.embedding_model
  if (modelChange) {
    const model = embeddingModel(deps, input.embedding_model!)
    patch.embedding_model = model.id
    patch.dimensions = model.dimensions!
    await store.ensureVectorIndex(deps.db.sql, model.dimensions!)
  }
  // A search keeps the base's row under its id (search.ts): dropped here before the write is sent
  // (the embedded database), and announced to every process once it is committed (server mode).
  accessChanged(id)
  const updated = await changingAccess([id], () => deps.db.sql.begin(async (tx) => {
    await store.lockKnowledgeBase(tx, id)
    if (modelChange) {
      if (!input.reembed && (await store.hasDocuments(tx, id))) {
        const change = patch.dimensions === current.dimensions ? '' : ` (${current.dimensions} → ${patch.dimensions} dimensions)`
        throw new AppError('conflict', `changing the embedding model of a knowledge base with documents${change} re-embeds every document: send reembed: true`, {
          param: 'embedding_model',
        })
      }
    }
    const row = await store.updateKnowledgeBase(tx, id, patch)
    if (modelChange && input.reembed) await requeueAllIn(tx, row)
    return row
  }))
  if (modelChange && input.reembed) deps.wake.nudge('documents')
  return updated
}

/** Deletes the base with its documents and chunks (rows cascade), then its originals. */
export async function deleteKnowledgeBase(deps: Deps, caller: Caller, id: string): Promise<void> {
  const kb = await loadKnowledgeBase(deps, caller, id, 'build')
  // Its row kept by searches is dropped here and in every process, as an update's (above).
  accessChanged(kb.id)
  await changingAccess([kb.id], () => store.deleteKnowledgeBase(deps.db.sql, kb.id))
  await deps.files.deletePrefix(kb.id).catch((err) => deps.log.warn({ err, knowledge_base_id: kb.id }, 'could not remove the originals of a deleted knowledge base'))
}
