import type { Deps } from '../../deps'
import { AppError } from '../../lib/errors'
import { findAgent } from '../../store/agents'
import type { RunRow } from '../../store/runs'
import type { Caller } from '../access'
import { agentNodeProblem } from '../references'
import { abortedError } from '../workflows/nodes/common'
import { NodeError, type AgentPort } from '../workflows/types'
import { prepareTurn } from './chat'

/** The node error codes of a turn's failures (docs/workflows.md, "agent"). */
const CODES: Record<string, string> = {
  not_found: 'agent_not_found',
  conflict: 'agent_unavailable',
  budget_exceeded: 'budget_exceeded',
  upstream_timeout: 'upstream_timeout',
  upstream_error: 'upstream_error',
  validation_error: 'invalid_config',
  forbidden: 'invalid_config',
}

/**
 * Agent turns for the `agent` nodes of `run`. The turn acts for the run inside its workspace (the
 * graph was checked when saved, by someone allowed to build it): an agent of another workspace is
 * not found, and the conversation is the run's user's unless the node names another user_id.
 */
export function agentPort(deps: Deps, run: RunRow): AgentPort {
  return {
    async turn(input, delta, signal) {
      const agent = await findAgent(deps.db.sql, input.agentId)
      if (!agent || agent.workspace_id !== run.workspace_id) throw new NodeError('agent_not_found', `agent ${input.agentId} not found in workspace ${run.workspace_id}`)
      const problem = agentNodeProblem(agent)
      if (problem) throw new NodeError('invalid_config', problem)
      const userId = input.userId ?? run.user_id ?? 'workflow'
      const caller: Caller = { keyId: `run:${run.id}`, userId, isRoot: true, workspaceId: run.workspace_id, roleLimit: null, issuedBy: null }
      try {
        const turn = await prepareTurn(deps, caller, agent.id, { message: input.message, user_id: userId, conversation_id: input.conversationId, workspace_id: run.workspace_id }, run.request_id ?? run.id)
        const r = await turn.run((e) => {
          if (e.event === 'message') delta(e.data.delta)
        }, signal)
        return {
          text: r.message.content,
          conversation_id: r.conversation_id,
          message_id: r.message_id,
          tool_calls: r.tool_calls,
          usage: { ...r.usage },
          finish_reason: r.finish_reason,
        }
      } catch (err) {
        if (signal.aborted) throw abortedError()
        if (err instanceof AppError) throw new NodeError(CODES[err.code] ?? 'upstream_error', err.message)
        throw err
      }
    },
  }
}
