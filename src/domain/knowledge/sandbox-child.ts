import { o200k } from '../../lib/bpe'
import { vectorText } from '../../store/vector-text'
import { embedText } from '../models/local/embed'
import { chunkDocument, TooManyChunks } from './chunk'
import { ParseError, parseDocument } from './parse'
import { CHUNKS_PER_MESSAGE, type SandboxChunk, type SandboxJob, type SandboxMessage, type WatchdogMessage } from './sandbox-protocol'

/**
 * The process documents are parsed and chunked in (sandbox-process.ts starts it, and kills it at its time or
 * memory limit): one job at a time, its chunks sent back in messages of CHUNKS_PER_MESSAGE, then
 * `done`; or the error the document fails with. With `embed`, each chunk also carries its local-embed
 * vector, as the text the insert statement sends or (server mode) as the float4 values COPY sends: the embedding is computed here, beside the chunker, whose
 * token count is the chunk's (counting it again for the embedding's usage cost as much as the
 * embedding itself), and the service's thread neither computes nor formats it.
 *
 * Its watchdog thread (sandbox-watchdog.ts) ends it when the service is gone and holds each job to
 * the same limits, so neither depends on the service being alive and responsive.
 */
const send = (message: SandboxMessage) => process.send!(message)
const watchdog = new Worker(new URL('./sandbox-watchdog.ts', import.meta.url).href)
const watching = new Promise((resolve) => watchdog.addEventListener('message', resolve, { once: true }))
const watch = (message: WatchdogMessage) => watchdog.postMessage(message)

process.on('message', async (job: SandboxJob) => {
  watch({ timeoutMs: job.timeoutMs, maxRssBytes: job.maxRssBytes })
  try {
    const chunks: SandboxChunk[] = chunkDocument(await parseDocument(job.type, job.bytes), job.settings, job.maxChunks)
    if (job.embed === 'text') for (const c of chunks) c.vector = vectorText(embedText(c.content))
    else if (job.embed === 'float4') for (const c of chunks) c.vector = Float32Array.from(embedText(c.content))
    for (let i = 0; i < chunks.length; i += CHUNKS_PER_MESSAGE) send({ id: job.id, chunks: chunks.slice(i, i + CHUNKS_PER_MESSAGE) })
    send({ id: job.id, done: chunks.length })
  } catch (err) {
    const error =
      err instanceof ParseError
        ? { code: err.code, message: err.message }
        : err instanceof TooManyChunks
          ? { code: 'too_many_chunks', message: `${err.message} (at most ${err.limit}): split it into smaller files` }
          : { code: 'parse_error', message: `the ${job.type} file could not be read: ${(err as Error)?.message ?? String(err)}` }
    send({ id: job.id, error })
  } finally {
    watch(null)
  }
})

// The service going away (its IPC channel closed) takes this process with it at once when it is
// idle; while it reads a document, its watchdog sees the service gone (sandbox-watchdog.ts).
process.on('disconnect', () => process.exit(0))

// The tokenizer's tables load, and the watchdog starts, before this process says it is ready: not
// inside a document's time limit, and no document is read unwatched.
o200k()
await watching
send({ ready: true })
