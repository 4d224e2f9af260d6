import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authentication } from './auth'
import { bodies } from './bodies'
import { errors } from './errors'
import { requestId } from './request-id'
import { respond, responder } from './respond'
import { securityHeaders } from './security-headers'

export { STREAMED_BODY } from './bodies'

/**
 * The conventions every route shares (docs/api.md, docs/architecture.md "Layout"), one plugin per
 * concern, in the order their hooks must run: the request id and the request's state, the security
 * headers, body limits and parsing, authentication and the rate limit of /v1, the error mapping, and
 * the one exit that serialises every JSON answer (respond.ts: metrics, access log, idempotency and
 * audit completion).
 */
export function conventions(deps: Deps) {
  const exit = responder(deps)
  return new Elysia({ name: 'conventions' })
    .use(requestId())
    .use(securityHeaders(deps.config))
    .use(bodies(deps.config))
    .use(authentication(deps))
    .use(errors(deps.log, exit))
    .use(respond(exit))
}
