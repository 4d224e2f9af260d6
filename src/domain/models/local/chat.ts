import { o200k } from '../../../lib/bpe'
import { boundedParts, countChatTokens, countTokens } from '../../../lib/tokens'
import type { ChatChunk, ChatCompletion, ChatMessage, ChatRequest, FinishReason, ToolDefinition, Usage } from '../types'
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
    // A fresh id per call, as a real model's: a client (an agent, an SDK's tool runner) keys results by
    // it, and one id shared by every call of the same shape mixed up their results.
    return { kind: 'tool', name: tool.definition.function.name, args, id: callId() }
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
 * Arguments taken from the user message, for every required property of the schema and for each
 * optional one the message gives a value for:
 *   - enum: the first value named in the message; a required one with none named takes the first value;
 *   - string: the next "quoted" (or “quoted”) text, else the text after the function's name without a
 *     leading preposition, up to the first punctuation ("get_weather for Paris, 3 days" → "Paris"),
 *     else the whole message. An optional string takes a quote, or that text when it is the schema's
 *     only string property;
 *   - number / integer: the first number in the message outside the function's name (0 for a
 *     required one when there is none);
 *   - boolean: false when the message says "false" or "no", else true (an optional one only when the
 *     message says "true", "false", "yes" or "no");
 *   - array, object: empty when required, else left out.
 * A schema with no properties gets `{}`: the function takes no arguments.
 */
export function toolArguments(tool: ToolDefinition, message: string, nameIndex: number): Record<string, unknown> {
  const schema = (tool.function.parameters ?? {}) as { properties?: Record<string, PropertySchema>; required?: unknown }
  const properties = schema.properties && typeof schema.properties === 'object' ? schema.properties : {}
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === 'string') : [])
  const name = tool.function.name
  const quotes = [...message.matchAll(/"([^"]*)"|“([^”]*)”/g)].map((m) => m[1] ?? m[2] ?? '')
  const rest = nameIndex >= 0 ? message.slice(nameIndex + name.length) : message
  const after = rest
    .replace(/^[\s:,;=\-–—(]*(?:(?:for|with|about|on|of|to|in|at|from|using|named|called)\s+)?/i, '')
    .split(/[,.;!?()\n]/)[0]!
    .trim()
  const withoutName = nameIndex >= 0 ? message.slice(0, nameIndex) + ' ' + rest : message
  const numberText = withoutName.match(/-?\d+(?:\.\d+)?/)?.[0]
  const number = Number(numberText ?? 0)
  const saysBoolean = /\b(?:true|false|yes|no)\b/i.test(withoutName)
  const typeOf = (property: PropertySchema) => (Array.isArray(property.type) ? property.type : [property.type ?? 'string']).find((t) => t !== 'null') ?? 'string'
  const strings = Object.entries(properties).filter(([, p]) => !Array.isArray(p?.enum) && typeOf(p ?? {}) === 'string').length
  const args: Record<string, unknown> = {}
  let nextQuote = 0
  // Required properties first (in the order `required` lists them), then the others in schema order.
  const keys = [...required, ...Object.keys(properties).filter((k) => !required.has(k))]
  for (const key of keys) {
    const property = properties[key] ?? {}
    const must = required.has(key)
    const type = typeOf(property)
    if (Array.isArray(property.enum) && property.enum.length > 0) {
      const named = property.enum.find((v) => typeof v === 'string' && nameAt(message, v) >= 0)
      if (named !== undefined || must) args[key] = named ?? property.enum[0]
    } else if (type === 'number' || type === 'integer') {
      if (numberText !== undefined || must) args[key] = type === 'integer' ? Math.trunc(number) : number
    } else if (type === 'boolean') {
      if (saysBoolean || must) args[key] = !/\b(?:false|no)\b/i.test(withoutName)
    } else if (type === 'array' || type === 'object') {
      if (must) args[key] = type === 'array' ? [] : {}
    } else if (nextQuote < quotes.length) args[key] = quotes[nextQuote++]
    else if (must) args[key] = after || message.trim()
    else if (strings === 1 && (after || message.trim())) args[key] = after || message.trim()
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

/** `call_` and 24 random hex digits (96 bits), the shape of OpenAI's ids. */
const callId = () => `call_${Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString('hex')}`
const nowSeconds = () => Math.floor(Date.now() / 1000)
const completionId = () => `chatcmpl-${crypto.randomUUID().replace(/-/g, '').slice(0, 24)}`
