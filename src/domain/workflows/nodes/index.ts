import type { Executor, NodeType } from '../types'
import { code } from './code'
import { condition } from './condition'
import { end } from './end'
import { httpRequest } from './http-request'
import { knowledgeRetrieval } from './knowledge-retrieval'
import { llm } from './llm'
import { start } from './start'
import { template } from './template'
import { wait } from './wait'

/** One executor per node type (docs/workflows.md, "Node types"). `wait` is armed by the engine as a durable timer. */
export const executors: Record<NodeType, Executor> = {
  start,
  llm,
  template,
  condition,
  code,
  http_request: httpRequest,
  knowledge_retrieval: knowledgeRetrieval,
  wait,
  end,
}

export { closeCodePool } from './code-pool'
