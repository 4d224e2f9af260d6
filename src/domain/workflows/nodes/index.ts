import type { Executor, NodeType } from '../types'
import { code } from './code'
import { condition } from './condition'
import { end } from './end'
import { httpRequest } from './http-request'
import { knowledgeRetrieval } from './knowledge-retrieval'
import { llm } from './llm'
import { start } from './start'
import { template } from './template'
import { iteration, subWorkflow } from './children'
import { humanInput, wait } from './wait'
import { agent } from './agent'

/** One executor per node type (docs/workflows.md, "Node types"). `wait` and `human_input` are held by the engine (a durable timer, a person's input), not executed. */
export const executors: Record<NodeType, Executor> = {
  start,
  llm,
  template,
  condition,
  code,
  http_request: httpRequest,
  knowledge_retrieval: knowledgeRetrieval,
  wait,
  sub_workflow: subWorkflow,
  iteration,
  human_input: humanInput,
  agent,
  end,
}

export { closeCodePool } from './code-pool'
