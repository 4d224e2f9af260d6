import type { Deps } from '../deps'
import type { SecretBox } from '../lib/secret-box'
import { anySealedSecret, getSecretKeyCheck, putSecretKeyCheck } from '../store/secret-key-check'

const CHECK_TEXT = 'agent-platform-api SECRET_KEY check'

/** Start-up refused over SECRET_KEY: missing in server mode, or not the key the database's secrets were sealed with. */
export class SecretKeyError extends Error {
  override name = 'SecretKeyError'
}

/**
 * Server mode (DATABASE_URL): every process must open what another sealed, so a key generated per
 * process (in its own DATA_DIR) would break as soon as a second process started.
 */
export function requireSecretKey(config: { databaseUrl: string | null; secretKey: string | null }) {
  if (config.databaseUrl && !config.secretKey) {
    throw new SecretKeyError('SECRET_KEY is required in server mode (DATABASE_URL is set): every process of a deployment must open the secrets another sealed; set the same value (32+ characters) in every process, e.g. `openssl rand -base64 48`')
  }
}

/**
 * Opens the check value the first process sealed on this database (storing one on the first start),
 * so a process given another SECRET_KEY refuses to start instead of failing on every secret it reads.
 * On a database from before the check value, a secret already sealed decides. `source` says where
 * the key came from, for the message.
 */
export async function verifySecretKey(deps: Pick<Deps, 'db' | 'secretBox'>, source: string): Promise<void> {
  const { db: { sql }, secretBox: box } = deps
  let sealed = await getSecretKeyCheck(sql)
  if (sealed === null) {
    const existing = await anySealedSecret(sql)
    if (existing !== null) opens(box, existing, source, 'a secret this database already holds')
    sealed = await putSecretKeyCheck(sql, box.seal(CHECK_TEXT))
  }
  if (opens(box, sealed, source, "this database's check value") !== CHECK_TEXT) {
    throw new SecretKeyError(`SECRET_KEY (${source}) does not open this database's check value: start every process with the SECRET_KEY the database was first started with`)
  }
}

function opens(box: SecretBox, sealed: string, source: string, what: string): string {
  try {
    return box.open(sealed)
  } catch {
    // Another key id (SecretBoxError), or the same id and a ciphertext that does not authenticate.
    const keyId = sealed.split('.')[1] ?? '?'
    throw new SecretKeyError(`SECRET_KEY (${source}) cannot open ${what}: it was sealed under key id ${keyId}, this process has ${box.keyId}. Start every process with the SECRET_KEY the database was first started with`)
  }
}
