import { createParser } from 'eventsource-parser'

/** Everything the console does goes through the public API, with the key the user signed in with. */
const meta = (name: string) => document.querySelector<HTMLMetaElement>(`meta[name="${name}"]`)?.content ?? ''
export const API_BASE = meta('api-base')
export const CONSOLE_BASE = meta('console-base')

const KEY = 'agent-platform.console.key'
export const session = {
  get key(): string | null {
    return sessionStorage.getItem(KEY)
  },
  set key(value: string | null) {
    if (value) sessionStorage.setItem(KEY, value)
    else sessionStorage.removeItem(KEY)
  },
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly requestId?: string,
    /** The request field a validation_error is about (`data.approved`), when the API names one. */
    readonly param?: string,
  ) {
    super(message)
  }
}

/** Called when the API refuses the key (401): the console signs out. */
let onUnauthorized = () => {}
export function setOnUnauthorized(fn: () => void) {
  onUnauthorized = fn
}

export interface List<T> {
  data: T[]
  next_cursor: string | null
  has_more: boolean
}

export async function api<T = unknown>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const headers: Record<string, string> = { authorization: `Bearer ${session.key ?? ''}`, accept: 'application/json' }
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(API_BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal })
  return answer<T>(res)
}

async function answer<T>(res: Response): Promise<T> {
  const text = await res.text()
  let json: unknown = null
  try {
    json = text ? JSON.parse(text) : null
  } catch {
    // Not JSON: reported below with the status.
  }
  if (!res.ok) {
    const e = (json as { error?: { code?: string; message?: string; param?: string }; request_id?: string } | null) ?? {}
    if (res.status === 401) onUnauthorized()
    throw new ApiError(res.status, e.error?.code ?? 'error', `${res.status} ${e.error?.code ?? ''}: ${e.error?.message ?? (text.slice(0, 200) || res.statusText)}`, e.request_id, e.error?.param)
  }
  return json as T
}

export const query = (params: Record<string, string | number | undefined | null>) => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v))
  const s = q.toString()
  return s ? `?${s}` : ''
}

/** Every page of a list (up to `max` items), following next_cursor. */
export async function listAll<T>(path: string, params: Record<string, string | undefined> = {}, signal?: AbortSignal, max = 500): Promise<T[]> {
  const out: T[] = []
  let cursor: string | undefined
  do {
    const page = await api<List<T>>('GET', path + query({ ...params, limit: 100, cursor }), undefined, signal)
    out.push(...page.data)
    cursor = page.has_more ? (page.next_cursor ?? undefined) : undefined
  } while (cursor && out.length < max)
  return out
}

/**
 * A server-sent event stream read with fetch (EventSource cannot send the Bearer header), parsed with
 * eventsource-parser. Resolves with the response's headers once the stream ends.
 */
export async function stream(
  method: string,
  path: string,
  body: unknown,
  onEvent: (event: string, data: unknown, id?: string) => void,
  signal: AbortSignal,
  extraHeaders: Record<string, string> = {},
  onHeaders?: (headers: Headers) => void,
): Promise<void> {
  const headers: Record<string, string> = { authorization: `Bearer ${session.key ?? ''}`, accept: 'text/event-stream', ...extraHeaders }
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(API_BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal })
  if (!res.ok || !(res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    await answer(res)
    throw new ApiError(res.status, 'not_a_stream', `${res.status}: the answer is not an event stream`)
  }
  onHeaders?.(res.headers)
  const parser = createParser({
    onEvent: (e) => {
      let data: unknown = e.data
      try {
        data = JSON.parse(e.data)
      } catch {
        // Plain text data is passed on as it is.
      }
      onEvent(e.event ?? 'message', data, e.id)
    },
  })
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    parser.feed(value)
  }
}
