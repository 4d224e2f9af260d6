import { openapi } from '@elysiajs/openapi'
import { Elysia } from 'elysia'
import type { Deps } from './deps'
import { apiKeyRoutes } from './routes/api-keys'
import { opsRoutes } from './routes/ops'
import { conventions } from './routes/plugins/conventions'
import { workspaceRoutes } from './routes/workspaces'

/** Builds the whole HTTP app from its plugins. Never listens: main.ts does, tests call `handle`. */
export function buildApp(deps: Deps) {
  const v1 = `${deps.config.basePath}/v1`
  return new Elysia()
    .use(conventions(deps))
    .use(
      openapi({
        path: '/docs',
        specPath: '/docs/json',
        exclude: { paths: ['/docs', '/docs/json'] },
        documentation: {
          info: {
            title: 'Agent Platform API',
            version: '1.0.0',
            description:
              'Conversational agents, workflows, knowledge bases, models, workspaces and signed webhooks behind one HTTPS API. ' +
              'Every response carries request_id (and X-Request-Id); errors are { request_id, error: { code, message, param?, details? } }.',
          },
          servers: [{ url: '/', description: 'This server' }],
          components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key: ap_ followed by 40 base62 characters' } } },
          security: [{ bearer: [] }],
          tags: [
            { name: 'workspaces', description: 'Workspaces, archive and restore, ownership transfer' },
            { name: 'members', description: 'Workspace members and their roles' },
            { name: 'api-keys', description: 'Issuing, listing and revoking API keys' },
            { name: 'operations', description: 'Health, readiness and metrics (no authentication)' },
          ],
        },
      }),
    )
    .use(opsRoutes(deps))
    .group(v1, (app) => app.use(workspaceRoutes(deps)).use(apiKeyRoutes(deps)))
}

export type App = ReturnType<typeof buildApp>
