import type { TSchema } from 'elysia'
import { Agent, ChatAnswer, Conversation, Message } from './agents.model'
import { ApiKey } from './api-keys'
import { AuditEntry } from './audit'
import { ErrorBody, Meta } from './common.model'
import { Document, DocumentStatus, KnowledgeBase, SearchResults } from './knowledge.model'
import { Machine } from './machines'
import { ChatCompletionView, ModelView } from './models.model'
import { Run, RunEvent, SyncRun } from './runs'
import { Budget, Usage } from './usage'
import { Delivery, Webhook } from './webhooks.model'
import { Graph, Workflow } from './workflows.model'
import { DeletedWorkspace, Member, Workspace } from './workspaces.model'

/**
 * Schemas the OpenAPI document names in components.schemas and refers to with $ref (openapi-refine.ts):
 * the error body and every object a client keeps hold of, so generated clients get `Workspace`, `Run`...
 * instead of anonymous types. The parts of a schema are reached through it, so naming one here needs no
 * export in its route file.
 */
export const NAMED_SCHEMAS: Record<string, TSchema> = {
  Error: ErrorBody, Meta, Deleted: DeletedWorkspace,
  Workspace, Member, ApiKey, AuditEntry, Usage, Budget,
  Webhook, Delivery, Machine,
  Agent, Conversation, Message, ChatAnswer,
  Workflow, Graph, Run, RunUsage: Run.properties.usage, RunError: Run.properties.error, RunResult: SyncRun, RunEvent,
  KnowledgeBase, Document, DocumentStatus, SearchResult: SearchResults.properties.results.items,
  Model: ModelView, ChatCompletion: ChatCompletionView,
}

/**
 * One operationId per operation, by method and path below the base path: what a generated client names
 * its methods. The generator's own (`getV1Api-keys`, `getConsoleApp.js`) are not identifiers.
 * tests/http/openapi.happy.test.ts fails on an operation missing here.
 */
export const OPERATION_IDS: Record<string, string> = {
  'GET /healthz': 'getHealth',
  'GET /readyz': 'getReadiness',
  'GET /metrics': 'getMetrics',
  'GET /console': 'getConsolePage',
  'GET /console/app.js': 'getConsoleScript',
  'GET /console/app.css': 'getConsoleStylesheet',
  'GET /console/vendor/mermaid.min.js': 'getConsoleMermaidScript',

  'GET /v1/workspaces': 'listWorkspaces',
  'POST /v1/workspaces': 'createWorkspace',
  'GET /v1/workspaces/{id}': 'getWorkspace',
  'PATCH /v1/workspaces/{id}': 'updateWorkspace',
  'DELETE /v1/workspaces/{id}': 'deleteWorkspace',
  'POST /v1/workspaces/{id}/archive': 'archiveWorkspace',
  'POST /v1/workspaces/{id}/restore': 'restoreWorkspace',
  'POST /v1/workspaces/{id}/transfer': 'transferWorkspace',
  'GET /v1/workspaces/{id}/members': 'listMembers',
  'POST /v1/workspaces/{id}/members': 'addMember',
  'PATCH /v1/workspaces/{id}/members/{user_id}': 'changeMemberRole',
  'DELETE /v1/workspaces/{id}/members/{user_id}': 'removeMember',
  'GET /v1/workspaces/{id}/usage': 'getUsage',
  'PUT /v1/workspaces/{id}/budget': 'setBudget',
  'GET /v1/workspaces/{id}/audit-log': 'listAuditLog',

  'POST /v1/api-keys': 'createApiKey',
  'GET /v1/api-keys': 'listApiKeys',
  'DELETE /v1/api-keys/{id}': 'revokeApiKey',

  'GET /v1/machines': 'listMachines',
  'GET /v1/machines/{name}': 'getMachine',

  'POST /v1/webhooks': 'createWebhook',
  'GET /v1/webhooks': 'listWebhooks',
  'GET /v1/webhooks/{id}': 'getWebhook',
  'PATCH /v1/webhooks/{id}': 'updateWebhook',
  'DELETE /v1/webhooks/{id}': 'deleteWebhook',
  'POST /v1/webhooks/{id}/ping': 'pingWebhook',
  'GET /v1/webhooks/{id}/deliveries': 'listDeliveries',
  'GET /v1/webhooks/{id}/deliveries/{delivery_id}': 'getDelivery',
  'POST /v1/webhooks/{id}/deliveries/{delivery_id}/redeliver': 'redeliverDelivery',

  'GET /v1/models': 'listModels',
  'GET /v1/models/{id}': 'getModel',
  'POST /v1/models/llm/chat': 'chat',
  'POST /v1/models/embeddings': 'embed',
  'POST /v1/models/rerank': 'rerank',
  // OpenAI's own operationIds, so code generated for OpenAI reads the same.
  'POST /v1/chat/completions': 'createChatCompletion',
  'POST /v1/embeddings': 'createEmbedding',

  'POST /v1/workflows': 'createWorkflow',
  'GET /v1/workflows': 'listWorkflows',
  'GET /v1/workflows/{id}': 'getWorkflow',
  'PUT /v1/workflows/{id}': 'replaceWorkflow',
  'DELETE /v1/workflows/{id}': 'deleteWorkflow',
  'POST /v1/workflows/{id}/runs': 'runWorkflow',
  'GET /v1/workflows/{id}/runs': 'listWorkflowRuns',
  'GET /v1/runs': 'listRuns',
  'GET /v1/runs/{run_id}': 'getRun',
  'POST /v1/runs/{run_id}/cancel': 'cancelRun',
  'GET /v1/runs/{run_id}/events': 'listRunEvents',

  'POST /v1/knowledge-bases': 'createKnowledgeBase',
  'GET /v1/knowledge-bases': 'listKnowledgeBases',
  'GET /v1/knowledge-bases/{id}': 'getKnowledgeBase',
  'PATCH /v1/knowledge-bases/{id}': 'updateKnowledgeBase',
  'DELETE /v1/knowledge-bases/{id}': 'deleteKnowledgeBase',
  'POST /v1/knowledge-bases/{id}/documents': 'uploadDocument',
  'GET /v1/knowledge-bases/{id}/documents': 'listDocuments',
  'POST /v1/knowledge-bases/{id}/search': 'searchKnowledgeBase',
  'GET /v1/documents/{document_id}': 'getDocument',
  'DELETE /v1/documents/{document_id}': 'deleteDocument',
  'POST /v1/documents/{document_id}/reparse': 'reparseDocument',

  'POST /v1/agents': 'createAgent',
  'GET /v1/agents': 'listAgents',
  'GET /v1/agents/{id}': 'getAgent',
  'PATCH /v1/agents/{id}': 'updateAgent',
  'DELETE /v1/agents/{id}': 'deleteAgent',
  'POST /v1/agents/{id}/chat': 'chatWithAgent',
  'GET /v1/agents/{id}/conversations': 'listConversations',
  'GET /v1/conversations/{conversation_id}': 'getConversation',
  'DELETE /v1/conversations/{conversation_id}': 'deleteConversation',
}
