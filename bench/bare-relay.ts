/**
 * A second ceiling for bench:peers' relay figures: Bun.serve passing a chat request to the upstream
 * and its answer's body back untouched (`new Response(upstream.body)`), with no authentication,
 * accounting or reading of the stream. What any Bun relay costs on this machine at least.
 * UPSTREAM: the upstream's base URL (its /v1/chat/completions is called); PORT.
 */
const target = `${process.env.UPSTREAM}/v1/chat/completions`
Bun.serve({
  port: Number(process.env.PORT ?? 0),
  hostname: '127.0.0.1',
  async fetch(req) {
    if (req.method === 'GET') return new Response('ok')
    const res = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json', authorization: req.headers.get('authorization') ?? '' }, body: await req.text() })
    return new Response(res.body, { status: res.status, headers: { 'content-type': res.headers.get('content-type') ?? 'application/json' } })
  },
})
