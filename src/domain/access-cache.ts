import { accessGeneration } from '../store/access-generation'
import type { accessAndBudget } from '../store/credits'

type Answer = Awaited<ReturnType<typeof accessAndBudget>>

/** Entries kept at most; the oldest goes first. */
const MAX_ENTRIES = 10_000

/**
 * The answers of the hot read before a model call (`accessAndBudget`: the workspace, the caller's
 * role, the budget and the period's committed spend), kept until any write that could change one of
 * them is sent (store/access-generation.ts): one query less per call while nothing changes. Only
 * with the embedded database, whose one connection answers in order and which no other process
 * writes; in server mode `enabled` is false and every call reads the database.
 */
export class AccessCache {
  private entries = new Map<string, { generation: number; answer: Answer }>()

  constructor(readonly enabled: boolean) {}

  async get(key: string, read: () => Promise<Answer>): Promise<Answer> {
    if (!this.enabled) return read()
    const hit = this.entries.get(key)
    const generation = accessGeneration()
    if (hit && hit.generation === generation) return hit.answer
    const answer = await read()
    // Kept only if nothing was written since the read was sent: it may not have seen that write.
    if (accessGeneration() === generation) {
      if (hit) this.entries.delete(key)
      else if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!)
      this.entries.set(key, { generation, answer })
    }
    return answer
  }
}
