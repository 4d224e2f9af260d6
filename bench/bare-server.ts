/**
 * The ceiling of figure (a): Bun.serve answering a small JSON body, with nothing else in the way.
 * Same listen options as the service (loopback, PORT) so the difference is the plugin stack only.
 */
const body = JSON.stringify({ request_id: 'req_01jc0000000000000000000000', status: 'ok' })
Bun.serve({
  port: Number(process.env.PORT ?? 0),
  hostname: '127.0.0.1',
  fetch: () => new Response(body, { headers: { 'content-type': 'application/json' } }),
})
