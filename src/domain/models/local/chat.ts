import { o200k } from '../../../lib/bpe'
import { boundedParts, countChatTokens, countTokens } from '../../../lib/tokens'
import type { ChatChunk, ChatCompletion, ChatMessage, ChatRequest, FinishReason, ToolDefinition, Usage } from '../types'
import { hashRange } from './embed'
import { bm25, contentTerms, terms } from './rerank'

/**
 * `local-chat` is NOT an AI. It is a deterministic offline stand-in for development and tests, which
 * answers by quoting what it is given:
 *   - after a `tool` message: "From <function>: <the tool's result>";
 *   - when `tools` are given and the last user message names one of their functions (a whole-word,
 *     case-insensitive match; `tool_choice` "none" disables it, "required" or a named function forces
 *     it): a call to that function (see `toolArguments` for how the arguments are made up);
 *   - with context (system messages, earlier turns): "From the context: " and the (up to 3) context
 *     sentences with the best BM25 score against the last user message, in their original order;
 *     "The context says nothing about "…"." when none shares a word with it;
 *   - without context: a fixed sentence quoting the question and saying what this model is.
 * The same request gives the same content (ids and `created` differ). `stop` and `max_tokens` are
 * honoured; usage is counted with the real tokenizer (src/lib/tokens.ts). Streams go token by token.
 */
const CONTEXT_SENTENCES = 3
const QUOTE_CHARS = 200
const TOOL_RESULT_CHARS = 600

type Delta = ChatChunk['choices'][number]['delta']
type Answer = { kind: 'text'; text: string } | { kind: 'tool'; name: string; args: string; id: string }

interface Rendered {
  answer: Answer
  /** The answer (content, or a tool call's arguments) as streamed: one piece per token. */
  pieces: { text: string; tokens: number }[]
  finish: FinishReason
  usage: Usage
}

export function localChat(req: ChatRequest): ChatCompletion {
  const r = render(req)
  const text = r.pieces.map((p) => p.text).join('')
  const message: ChatMessage =
    r.answer.kind === 'text'
      ? { role: 'assistant', content: text }
      : { role: 'assistant', content: null, tool_calls: [{ id: r.answer.id, type: 'function', function: { name: r.answer.name, arguments: text } }] }
  return { id: completionId(), object: 'chat.completion', created: nowSeconds(), model: req.model, choices: [{ index: 0, message, finish_reason: r.finish }], usage: r.usage }
}

/**
 * The same answer as `localChat`, one chunk per token: first the role (and the tool call's id and name),
 * then the pieces, then an empty delta with `finish_reason` and `usage`. Stops as soon as `signal` is
 * aborted (checked before every chunk) without yielding anything more.
 */
export async function* localChatStream(req: ChatRequest, signal: AbortSignal): AsyncGenerator<ChatChunk> {
  const r = render(req)
  const id = completionId()
  const created = nowSeconds()
  const chunk = (delta: Delta, finish: FinishReason | null = null, usage?: Usage): ChatChunk => ({
    id, object: 'chat.completion.chunk', created, model: req.model,
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...(usage ? { usage } : {}),
  })
  const call = r.answer.kind === 'tool' ? r.answer : null
  if (signal.aborted) return
  yield call
    ? chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] })
    : chunk({ role: 'assistant', content: '' })
  for (const piece of r.pieces) {
    if (signal.aborted) return
    yield chunk(call ? { tool_calls: [{ index: 0, function: { arguments: piece.text } }] } : { content: piece.text })
  }
  if (signal.aborted) return
  yield chunk({}, r.finish, r.usage)
}

function render(req: ChatRequest): Rendered {
  const answer = answerTo(req)
  let text = answer.kind === 'text' ? answer.text : answer.args
  let finish: FinishReason = answer.kind === 'text' ? 'stop' : 'tool_calls'
  if (answer.kind === 'text') text = cutAtStop(text, req.stop)
  let pieces = tokenPieces(text)
  if (req.max_tokens !== undefined) {
    let used = 0
    let kept = 0
    while (kept < pieces.length && used + pieces[kept]!.tokens <= req.max_tokens) used += pieces[kept++]!.tokens
    if (kept < pieces.length) {
      pieces = pieces.slice(0, kept)
      finish = 'length'
    }
  }
  const produced = pieces.map((p) => p.text).join('')
  const completion = answer.kind === 'text' ? countTokens(produced) : countTokens(answer.name) + countTokens(produced)
  const prompt = countChatTokens(req.messages)
  return { answer, pieces, finish, usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } }
}

function answerTo(req: ChatRequest): Answer {
  const messages = req.messages
  const last = messages.at(-1)
  let userAt = -1
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === 'user') { userAt = i; break }
  const question = userAt >= 0 ? (messages[userAt]!.content ?? '') : ''
  if (last?.role === 'tool') return { kind: 'text', text: fromToolResults(messages) }
  const tool = req.tools?.length ? chooseTool(req.tools, req.tool_choice, question) : null
  if (tool) {
    const args = JSON.stringify(toolArguments(tool.definition, question, tool.at))
    // A deterministic call id (from the call and its place in the conversation): a replayed conversation
    // gets the same id, which is what lets a test feed the tool result back without reading it first.
    const seed = `${tool.definition.function.name}\u0000${args}\u0000${messages.length}`
    const h = hashRange(seed, 0, seed.length)
    return { kind: 'tool', name: tool.definition.function.name, args, id: `call_${hex(h)}${hex(h ^ 0x5bd1e995)}${hex(Math.imul(h, 0x9e3779b1))}` }
  }
  const context = messages.filter((m, i) => i !== userAt && m.content).flatMap((m) => sentences(m.content!))
  if (context.length === 0) {
    return { kind: 'text', text: question.trim() ? `You asked: "${quote(question)}". I am local-chat, an offline test model, not an AI: I answer only by quoting the context I am given, and there is none.` : 'I am local-chat, an offline test model, not an AI, and there was no question.' }
  }
  // Function words out of the question: over a handful of sentences IDF cannot discount "the", and a
  // sentence sharing only "the" with the question is not an answer to it.
  const content = contentTerms(question)
  const scores = bm25(content.length > 0 ? content : terms(question), context.map(terms))
  const best = scores
    .map((score, i) => ({ score, i }))
    .filter((s) => s.score > 0)
    .sort((x, y) => y.score - x.score || x.i - y.i)
    .slice(0, CONTEXT_SENTENCES)
    .sort((x, y) => x.i - y.i)
  if (best.length === 0) return { kind: 'text', text: `The context says nothing about "${quote(question)}".` }
  return { kind: 'text', text: `From the context: ${[...new Set(best.map((b) => context[b.i]!))].join(' ')}` }
}

/** The tool messages after the last assistant turn, each attributed to the function that was called. */
function fromToolResults(messages: ChatMessage[]): string {
  let first = messages.length
  while (first > 0 && messages[first - 1]!.role === 'tool') first--
  const calls = new Map<string, string>()
  for (const m of messages) for (const c of m.tool_calls ?? []) calls.set(c.id, c.function.name)
  return messages
    .slice(first)
    .map((m) => {
      const name = (m.tool_call_id && calls.get(m.tool_call_id)) || m.name || 'the tool'
      const result = (m.content ?? '').replace(/\s+/g, ' ').trim()
      return `From ${name}: ${result.length > TOOL_RESULT_CHARS ? `${result.slice(0, TOOL_RESULT_CHARS)}…` : result || '(empty)'}`
    })
    .join(' ')
}

function chooseTool(tools: ToolDefinition[], choice: unknown, question: string): { definition: ToolDefinition; at: number } | null {
  if (choice === 'none') return null
  const forced = typeof choice === 'object' && choice !== null ? (choice as { function?: { name?: unknown } }).function?.name : undefined
  let found: { definition: ToolDefinition; at: number } | null = null
  for (const definition of tools) {
    const at = nameAt(question, definition.function.name)
    if (typeof forced === 'string') {
      if (definition.function.name === forced) return { definition, at }
    } else if (at >= 0 && (!found || at < found.at)) found = { definition, at }
  }
  if (!found && choice === 'required') return { definition: tools[0]!, at: nameAt(question, tools[0]!.function.name) }
  return found
}

/** Where `name` occurs in `text` as a whole word (letters, digits and "_" around it do not count), or −1. */
function nameAt(text: string, name: string): number {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  return text.search(new RegExp(`(?<![\\p{L}\\p{N}_])${escaped}(?![\\p{L}\\p{N}_])`, 'iu'))
}

interface PropertySchema {
  type?: string | string[]
  enum?: unknown[]
}

/**
 * Arguments for the schema's required properties only (the rest are optional by definition), taken
 * from the user message:
 *   - enum: the first value named in the message, else the first value;
 *   - string: the next "quoted" (or “quoted”) text, else the text after the function's name without
 *     a leading preposition, up to the first punctuation ("get_weather for Paris, 3 days" → "Paris"),
 *     else the whole message;
 *   - number / integer: the first number in the message outside the function's name (0 if none);
 *   - boolean: false when the message says "false" or "no", else true;
 *   - array, object: empty.
 */
export function toolArguments(tool: ToolDefinition, message: string, nameIndex: number): Record<string, unknown> {
  const schema = (tool.function.parameters ?? {}) as { properties?: Record<string, PropertySchema>; required?: unknown }
  const required = Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === 'string') : []
  const name = tool.function.name
  const quotes = [...message.matchAll(/"([^"]*)"|“([^”]*)”/g)].map((m) => m[1] ?? m[2] ?? '')
  const rest = nameIndex >= 0 ? message.slice(nameIndex + name.length) : message
  const after = rest
    .replace(/^[\s:,;=\-–—(]*(?:(?:for|with|about|on|of|to|in|at|from|using|named|called)\s+)?/i, '')
    .split(/[,.;!?()\n]/)[0]!
    .trim()
  const withoutName = nameIndex >= 0 ? message.slice(0, nameIndex) + ' ' + rest : message
  const number = Number(withoutName.match(/-?\d+(?:\.\d+)?/)?.[0] ?? 0)
  const args: Record<string, unknown> = {}
  let nextQuote = 0
  for (const key of required) {
    const property = schema.properties?.[key] ?? {}
    const types = Array.isArray(property.type) ? property.type : [property.type ?? 'string']
    const type = types.find((t) => t !== 'null') ?? 'string'
    if (Array.isArray(property.enum) && property.enum.length > 0) {
      args[key] = property.enum.find((v) => typeof v === 'string' && nameAt(message, v) >= 0) ?? property.enum[0]
    } else if (type === 'number') args[key] = number
    else if (type === 'integer') args[key] = Math.trunc(number)
    else if (type === 'boolean') args[key] = !/\b(?:false|no)\b/i.test(withoutName)
    else if (type === 'array') args[key] = []
    else if (type === 'object') args[key] = {}
    else args[key] = nextQuote < quotes.length ? quotes[nextQuote++] : after || message.trim()
  }
  return args
}

/** Sentences and lines of a context text. */
function sentences(text: string): string[] {
  return text.split(/(?<=[.!?。！？])\s+|\n+/).map((s) => s.trim()).filter((s) => s.length > 0)
}

function cutAtStop(text: string, stop: string | string[] | undefined): string {
  let end = text.length
  for (const s of typeof stop === 'string' ? [stop] : (stop ?? [])) {
    const at = s ? text.indexOf(s) : -1
    if (at >= 0 && at < end) end = at
  }
  return text.slice(0, end)
}

const quote = (text: string) => {
  const flat = text.replace(/\s+/g, ' ').trim()
  return flat.length > QUOTE_CHARS ? `${flat.slice(0, QUOTE_CHARS)}…` : flat
}

/**
 * The text as its tokens' strings (o200k_base, the tokenizer of usage). The tokenizer's pre-token
 * pieces (about a word each) are whole characters; a piece of several tokens is split further where a
 * prefix of it encodes to exactly its first tokens, so a character spread over two tokens (an emoji, a
 * CJK character) stays whole in one piece instead of becoming two halves. Pieces over 64 characters are
 * not split (the search is quadratic in the piece's length) and count as one indivisible run of tokens.
 */
// "<|endoftext|>" in a message is text, not a control token (the library's default throws on it).
const AS_TEXT = { disallowedSpecial: new Set<string>() }

function tokenPieces(text: string): { text: string; tokens: number }[] {
  const out: { text: string; tokens: number }[] = []
  if (text.length === 0) return out
  for (const tokens of boundedParts(text).flatMap((part) => o200k().encodeGenerator(part, AS_TEXT))) {
    const piece = o200k().decode(tokens)
    if (tokens.length === 1 || piece.length > 64) {
      out.push({ text: piece, tokens: tokens.length })
      continue
    }
    let start = 0
    let used = 0
    for (let j = 1; j < piece.length && used < tokens.length - 1; j++) {
      const c = piece.charCodeAt(j)
      if (c >= 0xdc00 && c <= 0xdfff) continue
      const head = o200k().encode(piece.slice(start, j), AS_TEXT)
      if (used + head.length < tokens.length && head.every((t, k) => t === tokens[used + k])) {
        out.push({ text: piece.slice(start, j), tokens: head.length })
        used += head.length
        start = j
      }
    }
    out.push({ text: piece.slice(start), tokens: tokens.length - used })
  }
  return out
}

const hex = (n: number) => (n >>> 0).toString(16).padStart(8, '0')
const nowSeconds = () => Math.floor(Date.now() / 1000)
const completionId = () => `chatcmpl-${crypto.randomUUID().replace(/-/g, '').slice(0, 24)}`
