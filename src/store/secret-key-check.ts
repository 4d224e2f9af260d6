import type { Sql } from './db'

/** The check value sealed by the first process on this database, or null before any. */
export async function getSecretKeyCheck(sql: Sql): Promise<string | null> {
  const [row] = await sql<{ sealed: string }[]>`select sealed from secret_key_check`
  return row?.sealed ?? null
}

/** Stores `sealed` unless a check value exists already (processes starting at once); returns the one stored. */
export async function putSecretKeyCheck(sql: Sql, sealed: string): Promise<string> {
  await sql`insert into secret_key_check (sealed) values (${sealed}) on conflict (id) do nothing`
  return (await getSecretKeyCheck(sql))!
}

/** One secret sealed before the check value existed (a webhook's or a trigger's), if any. */
export async function anySealedSecret(sql: Sql): Promise<string | null> {
  const [row] = await sql<{ sealed: string }[]>`
    (select secret_encrypted as sealed from webhooks limit 1)
    union all
    (select secret_encrypted from triggers where secret_encrypted is not null limit 1)
    limit 1`
  return row?.sealed ?? null
}
