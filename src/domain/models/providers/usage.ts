import { countChatTokens, countTokens } from '../../../lib/tokens'
import type { ChatRequest, Usage } from '../types'

/** Shared by the remote adapters: where an upstream reports no usage, it is counted with o200k_base (src/lib/tokens.ts). */

/** The upstream's usage when it has the two counts; else counted (prompt from the request). */
export function usageOf(reported: Partial<Usage> | null | undefined, req: ChatRequest, completion: () => string): Usage {
  if (typeof reported?.prompt_tokens === 'number' && typeof reported.completion_tokens === 'number') {
    return { ...reported, prompt_tokens: reported.prompt_tokens, completion_tokens: reported.completion_tokens, total_tokens: reported.total_tokens ?? reported.prompt_tokens + reported.completion_tokens }
  }
  const prompt = countChatTokens(req.messages)
  const out = countTokens(completion())
  return { prompt_tokens: prompt, completion_tokens: out, total_tokens: prompt + out }
}
