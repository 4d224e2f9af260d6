import { monotonicFactory } from 'ulid'

/** Type prefixes of CONTRACT section 1; ids sort by creation time because a ULID does. */
export type IdPrefix =
  | 'ws' | 'agt' | 'conv' | 'msg' | 'wf' | 'run' | 'kb' | 'doc' | 'chk' | 'whk' | 'dlv' | 'key' | 'evt' | 'req'

const ulid = monotonicFactory()

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${ulid().toLowerCase()}`
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
