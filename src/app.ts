import { Elysia } from 'elysia'
import type { Deps } from './deps'
import { apiKeyRoutes } from './routes/api-keys'
import { auditRoutes } from './routes/audit'
import { consoleRoutes } from './routes/console'
import { docsRoutes } from './routes/docs'
import { machineRoutes } from './routes/machines'
import { opsRoutes } from './routes/ops'
import { conventions } from './routes/plugins/conventions'
import { webhookRoutes } from './routes/webhooks'
import { modelRoutes } from './routes/models'
import { usageRoutes } from './routes/usage'
import { workflowRoutes } from './routes/workflows'
import { hookRoutes, triggerRoutes } from './routes/triggers'
import { runRoutes } from './routes/runs'
import { knowledgeRoutes } from './routes/knowledge'
import { mcpRoutes } from './routes/mcp'
import { agentRoutes } from './routes/agents'
import { Agent, ChatAnswer, Conversation, Message } from './routes/agents.model'
import { ApiKey } from './routes/api-keys.model'
import { AuditEntry } from './routes/audit.model'
import { ErrorBody } from './routes/common.model'
import { Document, DocumentStatus, KnowledgeBase } from './routes/knowledge.model'
import { ChatCompletionView, ModelView } from './routes/models.model'
import { Run } from './routes/runs.model'
import { Budget } from './routes/usage.model'
import { Delivery, Webhook } from './routes/webhooks.model'
import { Graph, Workflow } from './routes/workflows.model'
import { Member, Workspace } from './routes/workspaces.model'
import { workspaceRoutes } from './routes/workspaces'

const documentation = {
  info: {
    title: 'Agent Platform API',
    version: '1.0.0',
    license: { name: 'MIT', identifier: 'MIT' },
    description:
      'Conversational agents, workflows, knowledge bases, models, workspaces and signed webhooks behind one HTTPS API. ' +
      'Every response carries request_id (and X-Request-Id); errors are { request_id, error: { code, message, param?, details? } }. ' +
      'Request bodies are JSON sent as Content-Type: application/json (or a +json type) with no charset or charset=utf-8; ' +
      'any other Content-Type, a body without one, and bytes that are not UTF-8 are 400 invalid_json. ' +
      'The one exception is a file upload (multipart/form-data) to POST /v1/knowledge-bases/{id}/documents. ' +
      'An empty body is no body, so actions that take none (archive, ping, cancel...) need no Content-Type (docs/api.md).',
  },
  // Paths in this document carry BASE_PATH themselves, so the server is the origin the document came from.
  servers: [{ url: '/', description: 'This service (the origin that served this document)' }],
  components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key: ap_ followed by 40 base62 characters' } } },
  security: [{ bearer: [] }],
  tags: [
    { name: 'workspaces', description: 'Workspaces, archive and restore, ownership transfer' },
    { name: 'members', description: 'Workspace members and their roles' },
    { name: 'api-keys', description: 'Issuing, listing and revoking API keys' },
    { name: 'webhooks', description: 'Signed event delivery to HTTPS receivers, delivery records and redelivery' },
    { name: 'machines', description: 'The state machines behind the API, described from their XState definitions, with Mermaid diagrams' },
    { name: 'models', description: 'LLM chat, embeddings and rerank through the gateway (failover, credits)' },
    { name: 'openai', description: 'OpenAI-compatible drop-ins: the official SDKs work with baseURL set to <base>/v1' },
    { name: 'agents', description: 'Agents (tool-using chat and chatflows), chat turns, streamed answers and conversations (docs/agents.md)' },
    { name: 'workflows', description: 'Workflow definitions: versioned graphs validated at save time (docs/workflows.md)' },
    { name: 'runs', description: 'Workflow runs: synchronous, async or streamed; events, cancel' },
    { name: 'triggers', description: 'Schedules and inbound webhooks that start workflow runs (docs/triggers.md)' },
    { name: 'knowledge', description: 'Knowledge bases, document uploads and their ingestion, search (docs/knowledge.md)' },
    { name: 'usage', description: 'Credits used and budgets' },
    { name: 'mcp', description: 'The service as an MCP server for AI clients: search, run workflows, chat with agents, list resources (docs/mcp.md)' },
    { name: 'audit', description: 'Who changed what, when: the audit trail of a workspace (docs/audit.md)' },
    { name: 'operations', description: 'Health, readiness and metrics (no authentication)' },
    { name: 'console', description: 'The management console\'s page (docs/console.md); the console itself calls the API above' },
  ],
}

/** Builds the whole HTTP app from its plugins. Never listens: main.ts does, tests call `handle`. */
/** Schemas the OpenAPI document names in components.schemas and refers to with $ref (routes/openapi-refine.ts). */
const NAMED_SCHEMAS = {
  Error: ErrorBody, Workspace, Member, ApiKey, AuditEntry, Budget, Webhook, Delivery, Agent, Conversation, Message, ChatAnswer,
  Workflow, Graph, Run, KnowledgeBase, Document, DocumentStatus, Model: ModelView, ChatCompletion: ChatCompletionView,
}

export function buildApp(deps: Deps) {
  const v1 = `${deps.config.basePath}/v1`
  // normalize: false so that `additionalProperties: false` rejects an unknown field with a 400
  // instead of Elysia silently dropping it.
  let built: { handle(r: Request): Promise<Response> } | undefined
  const app = new Elysia({ normalize: false })
    .use(conventions(deps))
    .use(docsRoutes(documentation, NAMED_SCHEMAS, () => built!))
    .use(opsRoutes(deps))
    .use(consoleRoutes(deps))
    .use(hookRoutes(deps))
    .group(v1, (api) => api.use(workspaceRoutes(deps)).use(apiKeyRoutes(deps)).use(machineRoutes(deps)).use(webhookRoutes(deps)).use(modelRoutes(deps)).use(usageRoutes(deps)).use(workflowRoutes(deps)).use(runRoutes(deps)).use(triggerRoutes(deps)).use(knowledgeRoutes(deps)).use(agentRoutes(deps)).use(auditRoutes(deps)).use(mcpRoutes(deps)))
  built = app
  return app
}
