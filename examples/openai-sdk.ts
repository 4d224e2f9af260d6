/**
 * The official OpenAI SDK against the service: chat, a streamed chat and embeddings through the
 * OpenAI drop-ins (`/v1/chat/completions`, `/v1/embeddings`; docs/models.md).
 * Run: `API=http://localhost:8080/v1 KEY=ap_... WS=ws_... bun examples/openai-sdk.ts`
 *
 * Every model call is charged to one workspace. A key restricted to a workspace, or a user in only
 * one, needs nothing more; a root key (or a user in several workspaces) must say which, here with
 * the `X-Workspace-Id` header on every request (`defaultHeaders`). Without it the call is a 400
 * `validation_error` with `param: "workspace_id"` (docs/api.md, "Keys, roles and workspaces").
 */
import OpenAI from 'openai'

const baseURL = process.env.API ?? 'http://localhost:8080/v1'
const apiKey = process.env.KEY
if (!apiKey) throw new Error('set KEY to an API key (the root key printed at first start, or a workspace key)')
const workspace = process.env.WS

const client = new OpenAI({ baseURL, apiKey, defaultHeaders: workspace ? { 'X-Workspace-Id': workspace } : {} })

const chat = await client.chat.completions.create({
  model: 'local-chat',
  messages: [
    { role: 'system', content: 'Refunds take five days. Shipping is free above 50 euros.' },
    { role: 'user', content: 'How long do refunds take?' },
  ],
})
console.log('chat:', chat.choices[0]?.message.content)

const stream = await client.chat.completions.create({
  model: 'local-chat',
  messages: [
    { role: 'system', content: 'Shipping is free above 50 euros.' },
    { role: 'user', content: 'Is shipping free?' },
  ],
  stream: true,
})
let streamed = ''
for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? ''
console.log('stream:', streamed)

const embeddings = await client.embeddings.create({ model: 'local-embed', input: ['refund policy', 'shipping costs'] })
console.log('embeddings:', embeddings.data.map((e) => `${e.embedding.length} dimensions`).join(', '))
