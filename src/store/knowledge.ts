/**
 * The knowledge store, split along its seams: bases, documents (with their leases and
 * transitions), chunks, and search. Callers import this module as one.
 */
export * from './knowledge/bases'
export * from './knowledge/chunks'
export * from './knowledge/documents'
export * from './knowledge/search'
export * from './knowledge/vector-index'
