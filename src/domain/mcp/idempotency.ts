import type { Deps } from '../../deps'
import { sha256Hex } from '../../lib/crypto'
import { AppError } from '../../lib/errors'
import { claimRecord, IDEMPOTENCY_PREFIX, settleRecord } from '../../store/idempotency'

/**
 * Tool calls that create something (a run, a chat turn) are idempotent per JSON-RPC id
 * (docs/mcp.md, "Retries"), as a REST write is per Idempotency-Key (docs/decisions.md, "Idempotency"):
 * the first call with an id executes; the same id while it runs is refused; with another tool or
 * other arguments it is refused; after it finished, its result is answered again and nothing is
 * created twice. Records live in the same store, under the same prefix (journaled in DATA_DIR
 * without Redis), for the same 24 h.
 */

export interface CallScope {
  /** The API key that sent the call. */
  keyId: string
  /**
   * The Mcp-Session-Id the client echoes, if any. The SDK clients number their requests from 0 in
   * every connection, so the id alone would make the first tools/call of every new connection a
   * "retry" of the previous connection's; the session the service handed out at initialize keeps
   * them apart. A client with no session header is scoped by its key alone.
   */
  session: string | null
  /** The JSON-RPC request id. */
  id: string | number
}

export interface ToolResult {
  content: { type: 'text'; text: string }[]
  structuredContent?: Record<string, unknown>
  isError?: boolean
}

/**
 * Runs `execute` once per (key, session, JSON-RPC id): a retry gets the stored result. `execute`
 * answers the result and the HTTP status its REST twin would have had (whether it is kept).
 */
export async function oncePerId(
  deps: Pick<Deps, 'redis' | 'inFlight' | 'log'>,
  scope: CallScope,
  tool: string,
  args: unknown,
  execute: () => Promise<{ result: ToolResult; status: number }>,
): Promise<ToolResult> {
  const key = `${IDEMPOTENCY_PREFIX}mcp:${scope.keyId}:${sha256Hex(`${scope.session ?? ''}\n${JSON.stringify(scope.id)}`)}`
  const fingerprint = sha256Hex(`${tool}\n${canonical(args)}`)
  const id = JSON.stringify(scope.id)
  const kept = await claimRecord<{ result: ToolResult }>(deps.inFlight, key, fingerprint, {
    reused: () => new AppError('idempotency_key_reused', `JSON-RPC id ${id} was used for another tool or other arguments; send each new call with a new id`, { param: 'id' }),
    inUse: () => new AppError('idempotency_key_in_use', `the call with JSON-RPC id ${id} is still being processed; retry later`, { param: 'id' }),
  })
  if (kept) return kept.result
  let outcome: { result: ToolResult; status: number }
  try {
    outcome = await execute()
  } catch (err) {
    await deps.redis.del(key).catch(() => {})
    throw err
  }
  try {
    await settleRecord(deps.redis, key, fingerprint, outcome.status, { result: outcome.result })
  } catch (err) {
    // The side effect happened; failing the answer now would invite a duplicate retry.
    deps.log.error({ err }, 'could not store the idempotency record of an MCP tool call')
  }
  return outcome.result
}

/** JSON with object keys sorted, so the same arguments in another key order are the same call. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_, v) =>
    v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]])) : v)
}
