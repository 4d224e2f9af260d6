import { type Block, decodeText, ParseError } from './types'

/**
 * JSON as readable `key: value` lines, nested keys as paths (`author.name: Ada`, `steps[1].text: Click
 * Invite`), arrays of scalars on one line (`tags: account, security`). One block per record: per item
 * of a top-level array, per top-level key of an object, and per item of a top-level key's array of
 * objects (`{"data": [...]}` is as common as a bare array). A top-level scalar is its own text.
 * null, empty strings and empty containers say nothing and are left out.
 */
export function parseJson(bytes: Uint8Array): Block[] {
  let value: unknown
  try {
    value = JSON.parse(decodeText(bytes))
  } catch (err) {
    if (err instanceof ParseError) throw err
    throw new ParseError('parse_error', `the JSON file is not valid JSON: ${(err as Error).message}`)
  }
  const texts: string[] = []
  if (Array.isArray(value)) {
    for (const item of value) texts.push(lines(item, ''))
  } else if (isObject(value)) {
    for (const [key, v] of Object.entries(value)) {
      if (Array.isArray(v) && v.some(isObject)) v.forEach((item, i) => texts.push(lines(item, `${path('', key)}[${i}]`)))
      else texts.push(lines(v, path('', key)))
    }
  } else texts.push(scalar(value))
  return texts.filter((t) => t.trim() !== '').map((text) => ({ kind: 'text', text }))
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** `a.b`, or `a["odd key"]` for a key that would not read as one path segment. */
function path(prefix: string, key: string): string {
  if (!/^[^.[\]\s"]+$/.test(key)) return `${prefix}[${JSON.stringify(key)}]`
  return prefix === '' ? key : `${prefix}.${key}`
}

function scalar(v: unknown): string {
  return v === null ? '' : typeof v === 'string' ? v.trim() : String(v)
}

/** The `key: value` lines of a value at `prefix` ('' at the top: a scalar is then just its text). */
function lines(value: unknown, prefix: string): string {
  const out: string[] = []
  const walk = (v: unknown, at: string): void => {
    if (Array.isArray(v)) {
      if (v.every((x) => !isObject(x) && !Array.isArray(x))) {
        const list = v.map(scalar).filter((s) => s !== '')
        if (list.length > 0) out.push(at === '' ? list.join(', ') : `${at}: ${list.join(', ')}`)
      } else v.forEach((x, i) => walk(x, `${at}[${i}]`))
    } else if (isObject(v)) {
      for (const [key, x] of Object.entries(v)) walk(x, path(at, key))
    } else {
      const s = scalar(v)
      if (s !== '') out.push(at === '' ? s : `${at}: ${s}`)
    }
  }
  walk(value, prefix)
  return out.join('\n')
}
