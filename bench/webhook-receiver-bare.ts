/**
 * The bench's receiver: HTTPS on loopback, answers 200 at once (or 500 to the first attempt of each
 * delivery id, with FAIL_FIRST=1), and records when each attempt of each delivery id arrived.
 * GET /stats (on the same port) answers { count, arrivals? }.
 */
const failFirst = process.env.FAIL_FIRST === '1'
const seen = new Map<string, number[]>()
let count = 0
const server = Bun.serve({
  hostname: '127.0.0.1',
  port: Number(process.env.PORT ?? 0),
  tls: { cert: Bun.file(process.env.TLS_CERT_FILE!), key: Bun.file(process.env.TLS_KEY_FILE!) },
  async fetch(req) {
    if (req.method === 'GET') {
      const url = new URL(req.url)
      const body: Record<string, unknown> = { count }
      if (url.searchParams.has('arrivals')) body.arrivals = Object.fromEntries(seen)
      return Response.json(body)
    }
    await req.arrayBuffer()
    count++
    const id = req.headers.get('x-service-delivery-id') ?? ''
    const at = seen.get(id)
    if (failFirst) {
      if (at) at.push(Date.now())
      else seen.set(id, [Date.now()])
      if (!at) return new Response('not yet', { status: 500 })
    }
    return new Response('ok')
  },
})
console.log(`listening ${server.port}`)
