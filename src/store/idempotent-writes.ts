import type { PendingQuery, Row } from 'postgres'
import type { Sql } from './db'

/**
 * The durable half of idempotency (docs/api.md, "Idempotency"): a write made under an
 * Idempotency-Key records the row it created in `idempotent_writes`, in the same transaction (or
 * statement) as the row. The answer a retry replays is stored in Redis only after the commit, so a
 * process killed in between leaves a row and no answer; the record is how the retry finds the row.
 * Its primary key (scope, key) also makes a second execution under the same key fail and roll back
 * (`KeyedWriteExists`) instead of creating a second row, whatever Redis remembers.
 */

/** The Idempotency-Key a write is made under, as the creating store functions take it. */
export interface WriteKey {
  /** Whose key: the API key's id, or `hook:<trigger id>`. */
  scope: string
  /** sha256 of the Idempotency-Key. */
  keyHash: string
  /** The request's fingerprint (method, path, query, body). */
  fingerprint: string
  /** Seals a secret the answer shows once (an API key), kept with the record for a retry (SECRET_KEY). */
  seal(plain: string): string
}

/** What a keyed write can create; each has its answer rebuilt from the row (src/routes/keyed-answers.ts). */
export type WriteKind = 'workspace' | 'member' | 'api_key' | 'workflow' | 'run' | 'trigger' | 'webhook' | 'knowledge_base' | 'document' | 'agent'

export interface IdempotentWriteRow {
  scope: string
  key_hash: string
  fingerprint: string
  kind: WriteKind
  resource_id: string
  sealed: string | null
  created_at: Date
}

/** How long a record is kept: the replay window of the stored answers (src/store/idempotency.ts). */
export const WRITE_RETENTION_MS = 24 * 60 * 60 * 1000

/**
 * A second execution under a key that already created something: thrown instead of the unique
 * violation, so the transaction rolls back and the request is answered from the first one's row.
 */
export class KeyedWriteExists extends Error {
  constructor(readonly key: WriteKey) {
    super('a write under this Idempotency-Key already created its row')
    this.name = 'KeyedWriteExists'
  }
}

const PKEY = 'idempotent_writes_pkey'

function rethrow(err: unknown, key: WriteKey): never {
  const e = err as { code?: string; constraint_name?: string; constraint?: string }
  if (e?.code === '23505' && (e.constraint_name ?? e.constraint) === PKEY) throw new KeyedWriteExists(key)
  throw err
}

/** Records, in the transaction `tx` that created it, the row a keyed write created. Nothing without a key. */
export async function recordWrite(tx: Sql, key: WriteKey | undefined, kind: WriteKind, resourceId: string, sealed: string | null = null): Promise<void> {
  if (!key) return
  try {
    await tx`
      insert into idempotent_writes (scope, key_hash, fingerprint, kind, resource_id, sealed)
      values (${key.scope}, ${key.keyHash}, ${key.fingerprint}, ${kind}, ${resourceId}, ${sealed})`
  } catch (err) {
    rethrow(err, key)
  }
}

/** `row`, once recorded as what `key`'s write created, in the transaction `tx` that inserted it. */
export async function recorded<T extends { id: string }>(tx: Sql, key: WriteKey | undefined, kind: WriteKind, row: T): Promise<T> {
  await recordWrite(tx, key, kind, row.id)
  return row
}

/**
 * `insert`, an `insert ... returning *` of one row, with the key's record written by the same
 * statement (a data-modifying CTE: both or neither), for the creates that are one autocommitted
 * statement. Without a key, `insert` as it is.
 */
export async function insertKeyed<T extends Row>(
  sql: Sql,
  key: WriteKey | undefined,
  kind: WriteKind,
  insert: PendingQuery<T[]>,
  sealed: string | null = null,
): Promise<T[]> {
  if (!key) return insert
  try {
    return await sql<T[]>`
      with created as (${insert}),
      keyed as (
        insert into idempotent_writes (scope, key_hash, fingerprint, kind, resource_id, sealed)
        select ${key.scope}, ${key.keyHash}, ${key.fingerprint}, ${kind}, id, ${sealed} from created
      )
      select * from created`
  } catch (err) {
    rethrow(err, key)
  }
}

/** The record of `scope`'s key, as long as it is kept (24 h, until the hourly retention deletes it). */
export async function findWrite(sql: Sql, scope: string, keyHash: string): Promise<IdempotentWriteRow | null> {
  const [row] = await sql<IdempotentWriteRow[]>`select * from idempotent_writes where scope = ${scope} and key_hash = ${keyHash}`
  return row ?? null
}

/** Deletes records past the replay window, `limit` at a time; answers how many. */
export async function deleteExpiredWrites(sql: Sql, limit: number): Promise<number> {
  const rows = await sql`
    delete from idempotent_writes where ctid in (
      select ctid from idempotent_writes where created_at <= now() - ${WRITE_RETENTION_MS / 1000} * interval '1 second' limit ${limit})
    returning 1`
  return rows.length
}
