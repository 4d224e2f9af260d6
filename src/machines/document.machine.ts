import { assign, setup } from 'xstate'
import type { MachineDefinition } from './definition'

/**
 * A knowledge-base document (docs/knowledge.md, "Statuses"): uploading → parsing → chunking →
 * embedding → ready, or failed from any of those with `{ code, message }`. Pure: the worker parses,
 * chunks and embeds, and tells the machine what happened; the machine records it and refuses what
 * cannot happen (a result after a failure, a second ready). `ready` and `failed` are settled, not
 * final: a reparse builds a new generation of chunks while the old one stays searchable.
 */
export const DOCUMENT_MACHINE_VERSION = 1

export type DocumentStatus = 'uploading' | 'parsing' | 'chunking' | 'embedding' | 'ready' | 'failed'

export interface DocumentContext {
  /** The generation of chunks being built (1, then +1 at every reparse). */
  generation: number
  /** The chunk settings this generation is cut with (fixed when parsing starts, so a resume cuts the same chunks). */
  chunking: { chunk_size: number; chunk_overlap: number; separators?: string[] } | null
  chunks_count: number
  error: { code: string; message: string } | null
}

export type DocumentEvent =
  | { type: 'upload.stored'; chunking: NonNullable<DocumentContext['chunking']> }
  | { type: 'parsed' }
  | { type: 'chunked'; chunks: number }
  | { type: 'indexed' }
  | { type: 'failed'; code: string; message: string }
  | { type: 'reparse.requested'; chunking: NonNullable<DocumentContext['chunking']> }
  | { type: 'restart.requested'; chunking: NonNullable<DocumentContext['chunking']> }

/** A re-embed (the base's embedding model changed) restarts an ingestion in flight as a new generation. */
const restart = {
  target: 'parsing' as const,
  reenter: true,
  actions: ['nextGeneration' as const, 'recordSettings' as const],
  description: 're-embed with a new model: a new generation; the worker of the old one finds its writes refused',
}

const fail = { target: 'failed' as const, actions: 'recordFailure' as const, description: 'the error { code, message } is kept; knowledge.document.failed' }

export const documentMachine = setup({
  types: {} as { context: DocumentContext; events: DocumentEvent },
  actions: {
    recordSettings: assign({
      chunking: ({ context, event }) => (event.type === 'upload.stored' || event.type === 'reparse.requested' ? event.chunking : context.chunking),
    }),
    nextGeneration: assign({ generation: ({ context }) => context.generation + 1, error: null }),
    recordChunks: assign({ chunks_count: ({ context, event }) => (event.type === 'chunked' ? event.chunks : context.chunks_count) }),
    recordFailure: assign({ error: ({ event }) => (event.type === 'failed' ? { code: event.code, message: event.message } : null) }),
  },
}).createMachine({
  id: 'document',
  description: 'A knowledge-base document: parsed, cut into chunks, embedded and indexed; every transition persisted.',
  context: { generation: 1, chunking: null, chunks_count: 0, error: null },
  initial: 'uploading',
  states: {
    uploading: {
      description: 'the original streams to storage (the upload answers once it is stored: parsing)',
      on: { 'upload.stored': { target: 'parsing', actions: 'recordSettings' }, failed: fail },
    },
    parsing: {
      description: 'the original is read into text blocks (PDF, DOCX, HTML, Markdown, CSV, JSON, text)',
      on: { parsed: { target: 'chunking' }, failed: fail, 'restart.requested': restart },
    },
    chunking: {
      description: 'the blocks are cut into chunks of chunk_size tokens with chunk_overlap',
      on: { chunked: { target: 'embedding', actions: 'recordChunks' }, failed: fail, 'restart.requested': restart },
    },
    embedding: {
      description: 'chunks are embedded and written in batches; a resumed worker embeds only those not written yet',
      on: {
        indexed: { target: 'ready', description: 'the new chunks replace the old generation at once; knowledge.document.ready' },
        failed: fail,
        'restart.requested': restart,
      },
    },
    ready: {
      description: 'searchable',
      on: { 'reparse.requested': { target: 'parsing', actions: ['nextGeneration', 'recordSettings'], description: 'POST /v1/documents/{id}/reparse: the old chunks stay searchable until the swap' } },
    },
    failed: {
      description: 'error { code, message }; a reparse may try again',
      on: { 'reparse.requested': { target: 'parsing', actions: ['nextGeneration', 'recordSettings'] } },
    },
  },
})

/** The document machine as the service runs it: snapshots of version 1 (the first), and its announcements. */
export const documentDefinition: MachineDefinition<DocumentContext> = {
  name: 'document',
  machine: documentMachine,
  version: DOCUMENT_MACHINE_VERSION,
  upgrades: {},
  announces: { ready: 'knowledge.document.ready', failed: 'knowledge.document.failed' },
  memo: true,
}
