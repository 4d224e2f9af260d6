import type { Caller } from '../domain/access'
import * as agents from '../domain/agents/service'
import * as bases from '../domain/knowledge/bases'
import * as documents from '../domain/knowledge/documents'
import * as triggers from '../domain/workflows/triggers'
import * as runsDomain from '../domain/workflows/runs'
import * as workflows from '../domain/workflows/service'
import * as webhooks from '../domain/webhooks'
import { access } from '../domain/ownership'
import type { Deps } from '../deps'
import { notFound } from '../lib/errors'
import { getApiKey } from '../store/api-keys'
import type { IdempotentWriteRow } from '../store/idempotent-writes'
import { getMember } from '../store/workspaces'
import { toAgent } from './agents.model'
import { toApiKey } from './api-keys.model'
import { envelope } from './common.model'
import { toKnowledgeBase, uploaded } from './knowledge.model'
import { toSync } from './runs.model'
import { toTrigger } from './triggers.model'
import { toWebhook } from './webhooks.model'
import { toWorkflow } from './workflows.model'
import { toMember, toWorkspace } from './workspaces.model'

/** An answer rebuilt from a row: what its route would answer for it now. */
export interface KeyedAnswer {
  status: number
  body: unknown
}

/**
 * The answer to a retry of a keyed write whose first execution created its row but never stored its
 * answer (the process was killed in between: docs/api.md, "Idempotency"): what the route answers
 * when it creates the row, built from the row as it is now, with the retry's request id. The caller
 * is the retry's, so a resource it may no longer read is a 404, as a GET would be. A run answers as
 * its request asked: a synchronous one waits for it (SYNC_RUN_TIMEOUT_MS) as the first request would
 * have; an async, streamed or hook-started one names the run (202).
 */
export async function keyedAnswer(deps: Deps, request: Request, requestId: string, caller: Caller, write: IdempotentWriteRow): Promise<KeyedAnswer> {
  const sql = deps.db.sql
  const id = write.resource_id
  const created = (data: unknown): KeyedAnswer => ({ status: 201, body: envelope(requestId, data) })
  switch (write.kind) {
    case 'workspace':
      return created(toWorkspace(await access(deps, caller, id, 'read')))
    case 'member': {
      const slash = id.indexOf('/')
      const workspaceId = id.slice(0, slash)
      await access(deps, caller, workspaceId, 'read')
      const member = await getMember(sql, workspaceId, id.slice(slash + 1))
      if (!member) throw notFound('member', id.slice(slash + 1))
      return created(toMember(member))
    }
    case 'api_key': {
      const row = await getApiKey(sql, id)
      // The key is shown once, by the answer to its creation: the retry that stands for it shows it.
      return created({ ...toApiKey(row), key: deps.secretBox.open(write.sealed!) })
    }
    case 'workflow':
      return created(toWorkflow(await workflows.loadWorkflow(deps, caller, id, 'read')))
    case 'trigger':
      return created(toTrigger(await triggers.loadTrigger(deps, caller, id, 'read'), `${new URL(request.url).origin}${deps.config.basePath}`))
    case 'webhook':
      return created(toWebhook(await webhooks.loadWebhook(deps, caller, id, 'read')))
    case 'knowledge_base':
      return created(toKnowledgeBase(await bases.loadKnowledgeBase(deps, caller, id, 'read')))
    case 'agent':
      return created(toAgent(await agents.loadAgent(deps, caller, id, 'read')))
    case 'document':
      return { status: 201, body: uploaded(requestId, await documents.loadDocument(deps, caller, id, 'read')) }
    case 'run': {
      const url = new URL(request.url)
      const async = url.searchParams.get('async')
      const streamed = (request.headers.get('accept') ?? '').includes('text/event-stream')
      if (write.scope.startsWith('hook:') || async === 'true' || async === '1' || streamed) {
        return { status: 202, body: { request_id: requestId, run_id: id, status: 'running' } }
      }
      await runsDomain.loadRun(deps, caller, id, 'read')
      const done = await runsDomain.waitForRun(deps, id, deps.config.syncRunTimeoutMs)
      return { status: done.status === 'running' ? 202 : 200, body: toSync(requestId, done) }
    }
  }
}
