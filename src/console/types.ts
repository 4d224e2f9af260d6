import type { components, paths } from './api-types'

/**
 * The API's objects as the console reads them, every one taken from the types generated from the
 * OpenAPI document (`api-types.ts`, `bun run console-types`): a response's shape is written once,
 * in the server's schemas, and a change there that the console does not follow fails its type check.
 */
type Schemas = components['schemas']

/** The JSON body of a 200 or 201 answer to `method path`. */
type Answer<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  responses: infer R
}
  ? R extends { 200: { content: { 'application/json': infer T } } }
    ? T
    : R extends { 201: { content: { 'application/json': infer T } } }
      ? T
      : never
  : never

export type Workspace = Schemas['Workspace']
export type Member = Schemas['Member']
export type AuditEntry = Schemas['AuditEntry']
export type Webhook = Schemas['Webhook']
export type Delivery = Schemas['Delivery']
export type Attempt = Delivery['attempts'][number]
export type Workflow = Schemas['Workflow']
export type Run = Schemas['Run']
export type Agent = Schemas['Agent']
export type KnowledgeBase = Schemas['KnowledgeBase']
export type Doc = Schemas['Document']
export type DocumentStatus = Answer<'/v1/documents/{document_id}', 'get'>
export type Usage = Answer<'/v1/workspaces/{id}/usage', 'get'>['data']
export type RunEvent = Answer<'/v1/runs/{run_id}/events', 'get'>['data'][number]
/** The graph is the workflow version's own, as stored (`Graph`). */
export type RunNodes = Omit<Answer<'/v1/runs/{run_id}/nodes', 'get'>, 'graph'> & { graph: Schemas['Graph'] }
export type Trigger = Answer<'/v1/workflows/{id}/triggers', 'get'>['data'][number]
export type SearchResult = Answer<'/v1/knowledge-bases/{id}/search', 'post'>['results'][number]
export type Machine = Answer<'/v1/machines', 'get'>['data'][number]
/** What a running run waits on (a human_input node). */
export type Waiting = NonNullable<Run['waiting']>
