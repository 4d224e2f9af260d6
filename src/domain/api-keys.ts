import { sha256Hex } from '../lib/crypto'
import { AppError, invalid } from '../lib/errors'
import { newId, randomBase62 } from '../lib/ids'
import type { ListQuery } from '../lib/lists'
import * as store from '../store/api-keys'
import type { ApiKeyRow } from '../store/api-keys'
import type { Pool as Sql } from '../store/db'
import type { WriteKey } from '../store/idempotent-writes'
import type { RedisPort } from '../store/redis'
import type { Unsubscribe } from '../store/redis/port'
import { adminWorkspaceIds, findWorkspaceAccess, getMember, getWorkspace } from '../store/workspaces'
import type { Role } from '../store/workspaces'
import { authorize, roleAtMost, roleBelow, type Action, type Caller, type EffectiveRole } from './access'

const REVOKED_CHANNEL = 'api-keys.revoked'
// A cached key is re-read at most this often, so a change made without pub/sub (a manual UPDATE)
// still reaches every process within a minute. Revocation through the API is immediate.
const POSITIVE_TTL_MS = 60_000
// Unknown tokens are remembered briefly so a flood of bad keys costs no query each.
const NEGATIVE_TTL_MS = 5_000
const MAX_ENTRIES = 10_000
const TOUCH_EVERY_MS = 60_000

export function generateKey(): string {
  return `ap_${randomBase62(40)}`
}

export function toCaller(row: ApiKeyRow): Caller {
  return { keyId: row.id, userId: row.user_id, isRoot: row.is_root, workspaceId: row.workspace_id, roleLimit: row.role_limit, issuedBy: row.issued_by }
}

/**
 * Authentication without a query per request: keys are cached in process by their SHA-256, and a
 * revocation is published through Redis so that every process drops the key at once.
 */
export class ApiKeys {
  private cache = new Map<string, { row: ApiKeyRow | null; at: number }>()
  private touched = new Set<string>()
  private lastTouch = new Map<string, number>()
  private unsubscribe: Unsubscribe | null = null
  private flusher: ReturnType<typeof setInterval> | null = null

  constructor(private readonly sql: Sql, private readonly redis: RedisPort) {}

  async start() {
    this.unsubscribe = await this.redis.subscribe(REVOKED_CHANNEL, (id) => this.forget(id))
    this.flusher = setInterval(() => void this.flushTouches().catch(() => {}), 10_000)
    this.flusher.unref?.()
  }

  async stop() {
    if (this.flusher) clearInterval(this.flusher)
    await this.unsubscribe?.()
    await this.flushTouches().catch(() => {})
  }

  /** Drops cached keys by key id, or every key of a workspace by workspace id (the prefixes differ). */
  private forget(id: string) {
    for (const [hash, entry] of this.cache) if (entry.row?.id === id || entry.row?.workspace_id === id) this.cache.delete(hash)
  }

  /**
   * A deleted workspace takes its restricted keys with it (ON DELETE CASCADE); without this they would
   * stay cached, and valid, for up to POSITIVE_TTL_MS in every process.
   */
  async forgetWorkspace(workspaceId: string) {
    this.forget(workspaceId)
    await this.redis.publish(REVOKED_CHANNEL, workspaceId)
  }

  async authenticate(token: string): Promise<Caller> {
    const hash = sha256Hex(token)
    const now = Date.now()
    let entry = this.cache.get(hash)
    if (!entry || now - entry.at > (entry.row ? POSITIVE_TTL_MS : NEGATIVE_TTL_MS)) {
      const row = await store.findApiKeyByHash(this.sql, hash)
      entry = { row, at: now }
      if (this.cache.size >= MAX_ENTRIES) this.cache.delete(this.cache.keys().next().value!)
      this.cache.set(hash, entry)
    }
    const row = entry.row
    if (!row) throw unauthenticated('unknown API key')
    if (row.revoked_at) throw unauthenticated('API key has been revoked')
    if (row.expires_at && row.expires_at.getTime() <= now) throw unauthenticated('API key has expired')
    if (now - (this.lastTouch.get(row.id) ?? 0) > TOUCH_EVERY_MS) {
      this.lastTouch.set(row.id, now)
      this.touched.add(row.id)
    }
    return toCaller(row)
  }

  async flushTouches() {
    if (this.touched.size === 0) return
    const ids = [...this.touched]
    this.touched.clear()
    await store.touchApiKeys(this.sql, ids)
  }

  /** Creates the root key when no key exists yet; returns the plain key only when it generated one. */
  async bootstrap(configured: string | null): Promise<{ created: boolean; key: string | null }> {
    // Replicas starting at once would each see no key and insert one (with BOOTSTRAP_API_KEY, the
    // second insert hits the unique hash and that process dies): one transaction under a lock.
    return this.sql.begin(async (tx) => {
      await store.lockApiKeyBootstrap(tx)
      if ((await store.countApiKeys(tx)) > 0) return { created: false, key: null }
      const key = configured ?? generateKey()
      await store.insertApiKey(tx, {
        id: newId('key'),
        key_hash: sha256Hex(key),
        prefix: key.slice(0, 7),
        name: 'bootstrap root key',
        user_id: 'root',
        workspace_id: null,
        role_limit: null,
        is_root: true,
        created_by: null,
        issued_by: null,
        expires_at: null,
      })
      return { created: true, key: configured ? null : key }
    })
  }

  /**
   * Root may issue any key. Anyone may issue a key for itself. An admin (or the owner) may issue keys
   * restricted to its workspace for members whose role there is below its own: an admin never for
   * another admin or the owner, who would then act, and be audited, as them. Such a key's role_limit
   * is the member's role when it is issued (or a lower one asked for), so it stays below its issuer
   * whatever happens to the membership later; a key's role_limit never exceeds the issuing key's own
   * limit. What a later change of the issuer's membership does to these keys: src/domain/workspaces.ts.
   */
  async create(
    caller: Caller,
    input: { user_id: string; name: string; workspace_id?: string; role_limit?: Role; expires_at?: Date },
    written?: WriteKey,
  ): Promise<{ row: ApiKeyRow; key: string }> {
    const workspaceId = input.workspace_id ?? caller.workspaceId
    if (caller.workspaceId !== null && workspaceId !== caller.workspaceId) {
      throw new AppError('forbidden', 'a key restricted to one workspace can only issue keys for that workspace')
    }
    const forSelf = input.user_id === caller.userId
    let roleLimit = input.role_limit ?? null
    if (!caller.isRoot) {
      if (workspaceId) {
        const ws = await this.access(caller, workspaceId, forSelf ? 'read' : 'manage')
        if (!forSelf) {
          const member = await getMember(this.sql, ws.id, input.user_id)
          if (!member) throw invalid('user_id', `is not a member of workspace ${ws.id}`)
          checkBelow(ws, input.user_id, member.role)
          // Capped at the member's role now (below the issuer's, checkBelow saw to it), stored on the
          // key: promoting the member later must not turn a key its issuer kept into a stronger one
          // (demote an admin, mint for it, promote it back: an admin key the issuer holds).
          roleLimit = roleLimit ? roleAtMost(roleLimit, member.role) : member.role
        } else if (ws.effective !== 'owner') {
          // One's own key follows one's role (it never exceeds it); a limit asked above it is lowered.
          roleLimit = roleLimit ? roleAtMost(roleLimit, ws.effective) : null
        }
      } else if (!forSelf) {
        throw new AppError('forbidden', 'only a root key may issue keys for other users outside a workspace')
      }
    } else if (workspaceId) {
      // Root skips the access check, not the existence check (else the foreign key answers a 500).
      await getWorkspace(this.sql, workspaceId)
    }
    if (input.expires_at && input.expires_at.getTime() <= Date.now()) invalidExpiry()
    if (caller.roleLimit) roleLimit = roleLimit ? roleAtMost(roleLimit, caller.roleLimit) : caller.roleLimit
    const key = generateKey()
    const row = await store.insertApiKey(this.sql, {
      id: newId('key'),
      key_hash: sha256Hex(key),
      prefix: key.slice(0, 7),
      name: input.name,
      user_id: input.user_id,
      workspace_id: workspaceId,
      role_limit: roleLimit,
      is_root: false,
      created_by: caller.keyId,
      issued_by: caller.userId,
      expires_at: input.expires_at ?? null,
    }, { key: written, plain: key })
    return { row, key }
  }

  async list(caller: Caller, q: ListQuery) {
    if (caller.isRoot && caller.workspaceId === null) return store.listApiKeys(this.sql, { all: true }, q)
    const adminOf = (await adminWorkspaceIds(this.sql, caller.userId)).filter((id) => caller.workspaceId === null || id === caller.workspaceId)
    const visible = caller.roleLimit && caller.roleLimit !== 'admin' ? [] : adminOf
    // A restricted key sees nothing of another workspace, not even its own user's keys there.
    const scoped = caller.workspaceId === null ? q : { ...q, filters: [...q.filters, { field: 'workspace_id', op: 'eq' as const, value: caller.workspaceId }] }
    return store.listApiKeys(this.sql, { userId: caller.userId, adminOf: visible }, scoped)
  }

  /** Revocation takes effect at once, here and (through pub/sub) in every other process. */
  async revoke(caller: Caller, id: string): Promise<ApiKeyRow> {
    const row = await store.getApiKey(this.sql, id).catch(() => null)
    if (!row || !(await this.mayManage(caller, row))) throw new AppError('not_found', `api key ${id} not found`)
    const revoked = await store.revokeApiKey(this.sql, id)
    this.forget(id)
    await this.redis.publish(REVOKED_CHANNEL, id)
    return revoked
  }

  /**
   * ownership.ts's `access`, on the pool the keys were built from: this class is part of Deps (it
   * authenticates every request), so it cannot be handed Deps without an import circle.
   */
  private async access(caller: Caller, workspaceId: string, action: Action, allowArchived = false) {
    return authorize(caller, await findWorkspaceAccess(this.sql, workspaceId, caller.userId), action, { id: workspaceId, allowArchived })
  }

  /**
   * False (404) for a key the caller may not see; 403 for a key of its workspace whose user is not
   * below it (an admin revoking the owner's or another admin's key). A former member has no role left:
   * its keys are any admin's to revoke.
   */
  private async mayManage(caller: Caller, row: ApiKeyRow): Promise<boolean> {
    if (caller.isRoot) return caller.workspaceId === null || row.workspace_id === caller.workspaceId
    if (row.is_root) return false
    if (row.user_id === caller.userId && (caller.workspaceId === null || row.workspace_id === caller.workspaceId)) return true
    if (!row.workspace_id || (caller.workspaceId !== null && caller.workspaceId !== row.workspace_id)) return false
    const ws = await this.access(caller, row.workspace_id, 'manage', true).catch(() => null)
    if (!ws) return false
    const member = await getMember(this.sql, ws.id, row.user_id)
    if (member) checkBelow(ws, row.user_id, member.role)
    return true
  }
}

/** Acting for another member (issuing or revoking its keys) needs a role above that member's own. */
function checkBelow(ws: { id: string; owner_id: string; effective: EffectiveRole }, userId: string, role: Role) {
  const target: EffectiveRole = ws.owner_id === userId ? 'owner' : role
  if (!roleBelow(target, ws.effective)) {
    throw new AppError('forbidden', `role ${ws.effective} may act only for members below it; ${userId} is ${target} in workspace ${ws.id}`, { param: 'user_id' })
  }
}

function unauthenticated(message: string) {
  return new AppError('unauthenticated', message, { headers: { 'www-authenticate': 'Bearer realm="api", error="invalid_token"' } })
}

function invalidExpiry(): never {
  throw invalid('expires_at', 'must be in the future')
}
