/** Type prefixes of ids (`ws_`, `wf_`, ...); ids sort by the millisecond they were made in, as a ULID does. */
export type IdPrefix =
  | 'ws' | 'agt' | 'conv' | 'msg' | 'wf' | 'run' | 'kb' | 'doc' | 'chk' | 'whk' | 'dlv' | 'key' | 'evt' | 'req' | 'crd' | 'aud' | 'trg'

// A ULID, lower-cased: 48 bits of milliseconds, then 80 bits drawn from the CSPRNG for every id.
// Not ULID's monotonic mode: incrementing the random part within a millisecond made every id
// derivable from its neighbours (a `req_` id, shown in every answer, gave away the trigger ids made
// in the same millisecond), so ids made within one millisecond are in no particular order; what
// needs an order within a millisecond keeps its own (docs/api.md, "Ids"; store/agents.ts, messages).
// Written here rather than taken from the ulid package because every request makes one: the time
// part is encoded once per millisecond, and the random bytes are drawn 256 ids at a time (one
// getRandomValues call per 4 KiB; each byte is used once, never reused). Measured in one loop,
// alternating, on a busy 2-core host: 0.50 µs an id, against 0.47 µs for the monotonic ids it replaced.
const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz'
let lastMs = -1
let timePart = ''
// One byte per character, masked to 5 bits: 256 is a multiple of 32, so each character is uniform.
const POOL = new Uint8Array(16 * 256)
let next = POOL.length

export function newId(prefix: IdPrefix): string {
  const ms = Date.now()
  if (ms !== lastMs) {
    lastMs = ms
    let t = ms
    timePart = ''
    for (let i = 0; i < 10; i++) {
      timePart = CROCKFORD[t % 32]! + timePart
      t = Math.floor(t / 32)
    }
  }
  if (next === POOL.length) {
    crypto.getRandomValues(POOL)
    next = 0
  }
  let id = timePart
  for (let end = next + 16; next < end; next++) id += CROCKFORD[POOL[next]! & 31]
  return `${prefix}_${id}`
}

/** The smallest id of `prefix` made at `ms` or later: ids sort by time, so `id < idFloor(...)` selects older rows. */
export function idFloor(prefix: IdPrefix, ms: number): string {
  let t = ms
  let time = ''
  for (let i = 0; i < 10; i++) {
    time = CROCKFORD[t % 32]! + time
    t = Math.floor(t / 32)
  }
  return `${prefix}_${time}${'0'.repeat(16)}`
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** 40 base62 characters from rejection sampling, so every character is uniform (238 bits). */
export function randomBase62(length: number): string {
  let out = ''
  while (out.length < length) {
    const bytes = crypto.getRandomValues(new Uint8Array(length * 2))
    for (const b of bytes) {
      if (b < 248 && out.length < length) out += BASE62[b % 62]
    }
  }
  return out
}
