import { checkResponseFormat, parseStructured, wantsJson, type ResponseFormat } from '../../models/response-format'
import type { ChatMessage, Role } from '../../models/types'
import { renderText } from '../templates'
import { NodeError, type Executor, type NodeUsage } from '../types'
import { abortedError, fromGatewayError, invalidConfig } from './common'

const ROLES: readonly string[] = ['system', 'user', 'assistant']

/**
 * A chat through the gateway (failover, breaker, budget check, credits), streamed: every content
 * delta goes to `ctx.delta` as it arrives. Output `{ text, usage }`; the node's usage is the same
 * figures, from the gateway's final chunk (what was charged). With `response_format` (OpenAI's
 * json_object or json_schema) the output adds `json`, the parsed answer, and an answer that does not
 * parse or does not satisfy the schema fails the node with `invalid_output` (docs/workflows.md,
 * "Structured output"); the credits were spent all the same.
 */
export const llm: Executor = async (node, ctx) => {
  const { model: modelId, messages, temperature, max_tokens, response_format } = node.config
  if (typeof modelId !== 'string') throw invalidConfig('config.model must be a model id')
  if (!Array.isArray(messages) || messages.length === 0) throw invalidConfig('config.messages must be a non-empty array of { role, content }')
  const rendered: ChatMessage[] = messages.map((m: { role?: unknown; content?: unknown }, i) => {
    if (typeof m?.role !== 'string' || !ROLES.includes(m.role) || typeof m.content !== 'string') {
      throw invalidConfig(`config.messages[${i}] must be { role: system|user|assistant, content: template }`)
    }
    return { role: m.role as Role, content: renderText(m.content, ctx.vars) }
  })
  if (response_format !== undefined) checkResponseFormat(response_format, (p) => {
    throw invalidConfig(`config.response_format${p.map((k) => `.${k}`).join('')} is not OpenAI's response_format`)
  })
  const format = response_format as ResponseFormat | undefined
  let text = ''
  let usage: NodeUsage = { tokens_in: 0, tokens_out: 0, credits: 0 }
  try {
    const model = ctx.gateway.model(modelId, 'llm')
    const req = {
      messages: rendered,
      ...(typeof temperature === 'number' ? { temperature } : {}),
      ...(typeof max_tokens === 'number' ? { max_tokens } : {}),
      ...(format ? { response_format: format } : {}),
    }
    for await (const chunk of ctx.gateway.chatStream(ctx.call, model, req, ctx.signal)) {
      for (const choice of chunk.choices) {
        const delta = choice.delta.content
        if (!delta) continue
        text += delta
        ctx.delta(delta)
      }
      if (chunk.usage) {
        const u = chunk.usage as typeof chunk.usage & { credits?: number }
        usage = { tokens_in: u.prompt_tokens, tokens_out: u.completion_tokens, credits: u.credits ?? 0 }
      }
    }
  } catch (err) {
    throw fromGatewayError(err, ctx.signal)
  }
  // A provider stream stops quietly on abort and the gateway still closes it with a usage chunk:
  // without this check a cancelled node would look like one that finished with a short answer.
  if (ctx.signal.aborted) throw abortedError()
  if (!wantsJson(format)) return { output: { text, usage }, usage }
  const parsed = parseStructured(text, format)
  if (!parsed.ok) throw new NodeError('invalid_output', parsed.message, usage)
  return { output: { text, usage, json: parsed.json }, usage }
}
