import { AppError } from '../../../lib/errors'
import { renderText } from '../templates'
import { NodeError, type Executor } from '../types'
import { invalidConfig } from './common'

/**
 * Searches the knowledge bases (docs/workflows.md, "knowledge_retrieval"): the query template rendered,
 * each base searched with its own retrieval mode, the results merged by score, the best `top_k` (default 5)
 * kept.
 */
export const knowledgeRetrieval: Executor = async (node, ctx) => {
  const { knowledge_base_ids: ids, query, top_k: topK, filters } = node.config as { knowledge_base_ids: string[]; query: string; top_k?: number; filters?: Record<string, unknown> }
  if (!Array.isArray(ids) || typeof query !== 'string') throw invalidConfig('config.knowledge_base_ids and config.query are required')
  const text = renderText(query, ctx.vars).trim()
  if (!text) throw new NodeError('invalid_input', 'the rendered query is empty')
  try {
    const results = await ctx.knowledge.search(ids, { query: text, top_k: topK ?? 5, ...(filters ? { filters } : {}) }, ctx.signal)
    return { output: { results } }
  } catch (err) {
    if (err instanceof AppError) throw new NodeError(err.code === 'not_found' ? 'knowledge_base_not_found' : err.code, err.message)
    throw err
  }
}
