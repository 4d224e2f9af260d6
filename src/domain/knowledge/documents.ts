import type { Deps } from '../../deps'
import { AppError, invalid } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { ListQuery } from '../../lib/lists'
import { start, type Persisted } from '../../machines/runner'
import { DOCUMENT_MACHINE_VERSION, documentMachine, type DocumentContext } from '../../machines/document.machine'
import * as store from '../../store/knowledge'
import type { Caller } from '../access'
import { loadOwned } from '../ownership'
import { loadKnowledgeBase } from './bases'
import { applyDocumentEvents, requeueIn } from './document-transitions'
import { typeOfName } from './parse'
import { storeMultipart } from './upload'
import type { WriteKey } from '../../store/idempotent-writes'

/** `group` is any string up to 64 characters (docs/knowledge.md, "Documents"). */
const MAX_GROUP = 64
const MAX_NAME = 255

type Snapshot = Persisted<DocumentContext>

/** Where a document's original is kept: under its base, so deleting a base removes its files at once. */
export const originalKey = (d: { knowledge_base_id: string; id: string }) => `${d.knowledge_base_id}/${d.id}`

export function loadDocument(deps: Deps, caller: Caller, id: string, action: 'read' | 'build'): Promise<store.DocumentRow> {
  return loadOwned(deps, caller, 'document', id, action, store.findDocument)
}

function checkMetadata(raw: unknown): Record<string, unknown> {
  if (raw === undefined) return {}
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw invalid('metadata', 'must be a JSON object of key/value pairs')
  return raw as Record<string, unknown>
}

function checkGroup(group: unknown): string | null {
  if (group === undefined || group === null || group === '') return null
  if (typeof group !== 'string' || group.length > MAX_GROUP) throw invalid('group', `must be a string of at most ${MAX_GROUP} characters`)
  return group
}

/** The row of a document whose original is stored: the machine is past `uploading`, at `parsing`. */
async function insertStored(
  deps: Deps,
  caller: Caller,
  kb: store.KnowledgeBaseRow,
  d: { id: string; name: string; type: string; size: number; sha256: string; group: string | null; metadata: Record<string, unknown> },
  written?: WriteKey,
): Promise<store.DocumentRow> {
  const snapshot = applyDocumentEvents(start(documentMachine, undefined as never).persisted as Snapshot, [{ type: 'upload.stored', chunking: kb.chunking }])!
  const row = await store.insertDocument(deps.db.sql, {
    id: d.id,
    knowledge_base_id: kb.id,
    workspace_id: kb.workspace_id,
    name: d.name,
    doc_type: d.type,
    group: d.group,
    size_bytes: d.size,
    sha256: d.sha256,
    metadata: d.metadata,
    status: 'parsing',
    snapshot,
    machine_version: DOCUMENT_MACHINE_VERSION,
    created_by: caller.userId,
  }, written)
  deps.wake.nudge('documents')
  return row
}

/** A multipart upload: the file streams to storage, then the document is queued for ingestion. */
export async function uploadFile(deps: Deps, caller: Caller, kbId: string, request: Request, written?: WriteKey): Promise<store.DocumentRow> {
  const kb = await loadKnowledgeBase(deps, caller, kbId, 'build')
  const id = newId('doc')
  const key = originalKey({ knowledge_base_id: kb.id, id })
  const upload = await storeMultipart(deps, request, key, deps.config.maxUploadBytes)
  try {
    let metadata: unknown
    if (upload.fields.metadata !== undefined && upload.fields.metadata !== '') {
      try {
        metadata = JSON.parse(upload.fields.metadata)
      } catch {
        throw invalid('metadata', 'is not valid JSON (send a JSON object serialized as a string)')
      }
    }
    if (upload.name.length > MAX_NAME) throw invalid('file', `the file name is longer than ${MAX_NAME} characters`)
    return await insertStored(deps, caller, kb, { id, name: upload.name, type: upload.type, size: upload.size, sha256: upload.sha256, group: checkGroup(upload.fields.group), metadata: checkMetadata(metadata) }, written)
  } catch (err) {
    await deps.files.delete(key)
    throw err
  }
}

/** A JSON text upload (`type: "text"`): stored as its original like a file, then queued. */
export async function uploadText(
  deps: Deps,
  caller: Caller,
  kbId: string,
  body: { name: string; content: string; metadata?: unknown; group?: unknown },
  written?: WriteKey,
): Promise<store.DocumentRow> {
  const kb = await loadKnowledgeBase(deps, caller, kbId, 'build')
  const metadata = checkMetadata(body.metadata)
  const group = checkGroup(body.group)
  // A name with one of our extensions keeps it (notes.md is parsed as Markdown); anything else is text.
  const type = typeOfName(body.name) === 'md' ? 'md' : 'txt'
  const id = newId('doc')
  const key = originalKey({ knowledge_base_id: kb.id, id })
  const bytes = new TextEncoder().encode(body.content)
  if (bytes.byteLength > deps.config.maxUploadBytes) {
    throw new AppError('payload_too_large', `content is larger than ${deps.config.maxUploadBytes} bytes (MAX_UPLOAD_BYTES)`, { param: 'content' })
  }
  const { size, sha256 } = await deps.files.write(key, [bytes], deps.config.maxUploadBytes)
  try {
    return await insertStored(deps, caller, kb, { id, name: body.name, type, size, sha256, group, metadata }, written)
  } catch (err) {
    await deps.files.delete(key)
    throw err
  }
}

export async function listDocuments(deps: Deps, caller: Caller, kbId: string, q: ListQuery) {
  const kb = await loadKnowledgeBase(deps, caller, kbId, 'read')
  return store.listDocuments(deps.db.sql, kb.id, q)
}

/**
 * Deletes a document at once, whatever its status: its chunks go with its row, an ingestion in flight
 * finds its next guarded write matching nothing and stops, and the original is removed.
 */
export async function deleteDocument(deps: Deps, caller: Caller, id: string): Promise<store.DocumentRow> {
  const doc = await loadDocument(deps, caller, id, 'build')
  const deleted = await store.deleteDocument(deps.db.sql, doc.id)
  if (!deleted) throw new AppError('not_found', `document ${id} not found`)
  await deps.files.delete(originalKey(doc)).catch((err) => deps.log.warn({ err, document_id: id }, 'could not remove a deleted document\'s original'))
  return deleted
}

/**
 * Re-parse (docs/knowledge.md, "Re-parse and delete") from `ready` or `failed` (409 otherwise) with the
 * base's current chunking, as a new generation; the chunks searched now stay until the new ones replace
 * them.
 */
export async function reparseDocument(deps: Deps, caller: Caller, id: string): Promise<store.DocumentRow> {
  const doc = await loadDocument(deps, caller, id, 'build')
  const kb = await loadKnowledgeBase(deps, caller, doc.knowledge_base_id, 'build')
  const row = doc.status === 'ready' || doc.status === 'failed' ? await requeueIn(deps.db.sql, doc, kb) : null
  if (!row) {
    const now = await store.findDocument(deps.db.sql, id)
    throw new AppError('conflict', `document ${id} is ${now?.status ?? 'gone'}; only a ready or failed document can be re-parsed`)
  }
  deps.wake.nudge('documents')
  return row
}
