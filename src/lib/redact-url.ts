/**
 * The address of an outgoing call (webhook receivers, `http_request` nodes, agents' `http` tools, MCP
 * servers, model providers) as messages, spans and logs may show it: scheme, host and port. Its path
 * and query stay out (docs/observability.md): a receiver's path or query often is its credential
 * (`/hooks/T0123/B0456/XXXX`, `?token=...`), and a failing call's message ends up on spans, in logs,
 * in a run's stored error.
 */
export function shownUrl(raw: string): string {
  const m = /^\s*([a-z][a-z0-9+.-]*:\/\/)?([^/?#\s]*)/i.exec(raw)
  // user:password@ is dropped with the rest: only the host and port are shown.
  const authority = (m?.[2] ?? '').replace(/^[^@]*@/, '')
  return `${m?.[1] ?? ''}${authority}`.slice(0, 200)
}

/** Every absolute URL in `text` cut to its scheme, host and port. */
export function redactUrls(text: string): string {
  return text.includes('://') ? text.replace(URL_IN_TEXT, (_all, scheme: string, host: string) => `${scheme}${host}`) : text
}

const URL_IN_TEXT = /([a-z][a-z0-9+.-]*:\/\/)(?:[^\s/?#@]*@)?([^\s/?#"'<>]*)[^\s"'<>]*/gi

/**
 * `text` (an error's message, an upstream's answer) without `raw`'s path and query: absolute URLs cut
 * to their origin, and the path, the query or both, wherever they appear alone (a server that echoes
 * "Cannot POST /hooks/T0123/..."), replaced by "…".
 */
export function scrubUrl(text: string, raw: string): string {
  let out = redactUrls(text)
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return out
  }
  const pieces = new Set<string>()
  for (const p of [url.pathname + url.search, url.search, url.search.slice(1), url.pathname]) {
    // A piece this short cannot be a credential, and taken out everywhere it would garble the message.
    if (p.length >= 4) {
      pieces.add(p)
      try {
        pieces.add(decodeURIComponent(p))
      } catch {}
    }
  }
  // Longest first, so a path with its query goes as one.
  for (const p of [...pieces].sort((a, b) => b.length - a.length)) if (p.length >= 4) out = out.split(p).join('…')
  return out
}
