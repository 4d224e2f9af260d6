import { Elysia } from 'elysia'
import { newId } from '../../lib/ids'
import { initState, pathOf } from './request-state'

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/**
 * Every request's id (the client's `X-Request-Id` when it is a sane one, else a new `req_` id), the
 * request's shared state (src/routes/plugins/request-state.ts) and the `x-request-id` answer header.
 * Registered first: every other hook reads the state it starts.
 */
export function requestId() {
  return new Elysia({ name: 'conventions.request-id' }).onRequest(({ request, set }) => {
    const incoming = request.headers.get('x-request-id')
    const id = incoming && CLIENT_REQUEST_ID.test(incoming) ? incoming : newId('req')
    initState(request, id, pathOf(request.url))
    set.headers['x-request-id'] = id
  })
}
