import { NodeError, type Executor } from '../types'

/** Accepted at save time so graphs can be written now; a run reaching it fails with this error. */
export const knowledgeRetrieval: Executor = async () => {
  throw new NodeError('not_available', 'knowledge retrieval is not available yet: knowledge bases arrive with the Knowledge issue')
}
