import type { PageContext } from '../context'
import { h, put } from '../dom'

export function noWorkspace(ctx: PageContext) {
  put(ctx.main, h('h1', null, 'No workspace'), h('p', null, 'This key sees no workspace. Create one through the API (POST /v1/workspaces), then reload.'))
}
