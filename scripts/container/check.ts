/**
 * The container check (docs/deployment.md, "The container check"): the image built from the
 * Dockerfile and run the way operators run it, with podman, on this machine. `.ci/run` runs it when
 * podman is installed. Three parts, each failing the check with what it saw:
 *
 * 1. The image: built on a local Bun base, its size, its contents (no tests, bench or docs; an
 *    unprivileged user), start-up to ready on the embedded database (reported beside a bare
 *    Bun.serve container, not judged: timings vary with the machine's load), a workspace that outlives a
 *    SIGTERM (drained, exit 0) and a restart, a second container on the same volume refused with the
 *    lock message, the HEALTHCHECK.
 * 2. Server mode: the topology of docker-compose.yml (PostgreSQL with pgvector, Redis, two API and two
 *    worker containers, the proxy); webhook deliveries, runs through a `wait` node and document
 *    ingestions under way while one worker container and then one API container are SIGKILLed (the
 *    restart policy brings them back); every run, document and delivery finishes, once.
 * 3. A rolling restart: a new image version replaces the worker containers one by one (SIGTERM,
 *    drained, recreated on the new image) while runs wait, deliveries retry and documents ingest; none
 *    is lost, none is done twice.
 *
 * Usage: bun run scripts/container/check.ts [--keep] [--parts=image,embedded,server]
 * (--keep leaves the containers up afterwards; --parts runs some parts only). It prints each build
 * step as it starts and a line every 30 s of a long wait, and leaves no unnamed (`<none>`) image: the
 * ones its builds make are removed at the end.
 */
import postgres from 'postgres'
import { generateKey } from '../../src/domain/api-keys'
import { freePort, loadCompose, recreate, up, type Topology } from './compose'
import { APP_IMAGE, appImage, BUN_IMAGE, bunBase, debianBase, serviceImages, SERVICE_IMAGES } from './images'
import { alive, cleanUp, danglingImages, imageId, imageSize, logs, podman, PREFIX, removeDangling, state } from './podman'

const keep = process.argv.includes('--keep')
const parts = (process.argv.find((a) => a.startsWith('--parts='))?.slice('--parts='.length) ?? 'image,embedded,server').split(',')
const began = performance.now()
const figures: string[] = []
const since = () => `${((performance.now() - began) / 1000).toFixed(1)} s`
const step = (what: string) => console.log(`\n== ${what} (${since()})`)
const note = (line: string) => {
  figures.push(line)
  console.log(`   ${line}`)
}

function check(ok: boolean, what: string, detail?: unknown): void {
  if (!ok) throw new Error(`container check: ${what}${detail === undefined ? '' : `\n${typeof detail === 'string' ? detail : JSON.stringify(detail, null, 2)}`}`)
}

async function waitFor<T>(probe: () => Promise<T | null | undefined | false>, what: string, timeoutMs = 60_000, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs
  // A long wait says so every 30 s: the check is alive, and what it waits on.
  return alive(`waiting for ${what}`, (async () => {
    for (;;) {
      const v = await probe().catch(() => null)
      if (v) return v
      if (Date.now() > deadline) throw new Error(`container check: timed out after ${timeoutMs} ms waiting for ${what}`)
      await Bun.sleep(intervalMs)
    }
  })())
}

/** One API call; `null` when nothing answered (a container being killed). */
async function call(base: string, key: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any } | null> {
  try {
    const res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(15_000),
    })
    const text = await res.text()
    let parsed: unknown = text
    try {
      parsed = JSON.parse(text)
    } catch {}
    return { status: res.status, body: parsed }
  } catch {
    return null
  }
}
async function must(base: string, key: string, method: string, path: string, body?: unknown): Promise<any> {
  const r = await call(base, key, method, path, body)
  check(r !== null && r.status < 300, `${method} ${path} answered ${r?.status ?? 'nothing'}`, r?.body)
  return r!.body
}

// ---------------------------------------------------------------------------------------------
// 1. The image

async function theImage(): Promise<void> {
  step('bases: Debian (debootstrap from the machine\'s mirror) and Bun')
  await debianBase()
  await bunBase()
  step('the service\'s image, from the Dockerfile')
  const t0 = performance.now()
  await appImage()
  note(`image build ${((performance.now() - t0) / 1000).toFixed(1)} s (cached layers reused); ${APP_IMAGE}`)
  const size = await imageSize(APP_IMAGE)
  const baseSize = await imageSize(BUN_IMAGE)
  note(`image size ${(size / 1e6).toFixed(0)} MB (of which the base ${(baseSize / 1e6).toFixed(0)} MB: Debian minbase and the Bun binary)`)

  // What it carries and who it runs as.
  const inside = await podman(['run', '--rm', '--network=none', '--entrypoint', 'sh', APP_IMAGE, '-c', 'id -u; id -un; ls -A /app; ls -A /app/src; test -w /app/src && echo writable || echo read-only; ls /app/node_modules/.cache/agent-platform'])
  const [uid, user, ...rest] = inside.out.split('\n')
  check(uid !== '0', 'the image runs as an unprivileged user', inside.out)
  const listing = rest.join('\n')
  for (const absent of ['tests', 'bench', 'docs', 'console', '.git', 'scratch', 'examples']) check(!new RegExp(`^${absent.replace('.', '\\.')}$`, 'm').test(listing), `the image carries no ${absent}`, listing)
  check(/^dist$/m.test(listing) && /^pglite-/m.test(listing), 'the image carries the console bundle (dist) and the migrated template', listing)
  check(/^read-only$/m.test(listing), 'the code is read-only to the service\'s user', listing)
  note(`runs as ${user} (uid ${uid}); /app holds ${rest.slice(0, rest.indexOf('src') + 1).join(' ')}`)
}

// ---------------------------------------------------------------------------------------------
// 2. Embedded: a volume, SIGTERM, restart, the lock

async function embedded(): Promise<void> {
  step('embedded: one container, a volume')
  const key = generateKey()
  const port = freePort()
  const base = `http://127.0.0.1:${port}`
  const volume = `${PREFIX}-data`
  await podman(['volume', 'create', volume])
  const args = ['--name', `${PREFIX}-embedded`, '-p', `127.0.0.1:${port}:8080`, '-v', `${volume}:/data`, '-e', `BOOTSTRAP_API_KEY=${key}`, APP_IMAGE]

  /** From `podman run`/`start` to /readyz 200, and from the process' start to its "listening" line. */
  const timeStart = async (start: () => Promise<unknown>, label: string) => {
    const t0 = performance.now()
    await start()
    await waitFor(() => fetch(`${base}/readyz`).then((r) => r.ok), 'the container to be ready', 30_000, 20)
    const total = performance.now() - t0
    const st = await state(`${PREFIX}-embedded`)
    const listening = (await logs(`${PREFIX}-embedded`)).split('\n').filter((l) => l.includes('"msg":"listening on')).pop()
    const inProcess = listening ? Date.parse(JSON.parse(listening).time) - Date.parse(st.startedAt.replace(/ \+0000 UTC$/, 'Z').replace(' ', 'T')) : NaN
    note(`${label}: ready ${Math.round(total)} ms after \`podman ${label.startsWith('first') ? 'run' : 'start'}\` (the process listened ${Math.round(inProcess)} ms after the container started)`)
    return total
  }
  // The ceiling: the same base, a bare Bun.serve, from `podman run` to its first answer.
  const bare = freePort()
  const tb = performance.now()
  await podman(['run', '-d', '--name', `${PREFIX}-bare`, '-p', `127.0.0.1:${bare}:8080`, BUN_IMAGE, 'bun', '-e', "Bun.serve({ port: 8080, fetch: () => new Response('ok') })"])
  await waitFor(() => fetch(`http://127.0.0.1:${bare}/`).then((r) => r.ok), 'a bare Bun.serve container to answer', 30_000, 20)
  note(`ceiling: a bare Bun.serve on the same base answers ${Math.round(performance.now() - tb)} ms after \`podman run\``)
  await podman(['rm', '-f', '-t', '0', `${PREFIX}-bare`])

  const first = await timeStart(() => podman(['run', '-d', ...args]), 'first start, fresh volume')
  // A figure, not a verdict of the check: a timing depends on what else the machine is doing.
  note(`start-up target (ready under 3 s on a fresh volume): ${first < 3000 ? 'met' : 'MISSED'}`)

  const ws = await must(base, key, 'POST', '/v1/workspaces', { name: 'Survives restarts' })
  const wsId = ws.data.id as string
  const kb = await must(base, key, 'POST', '/v1/knowledge-bases', { workspace_id: wsId, name: 'Container notes' })
  const doc = await must(base, key, 'POST', `/v1/knowledge-bases/${kb.data.id}/documents`, { type: 'text', name: 'a.txt', content: 'Containers keep their data in the volume mounted at /data.' })
  await waitFor(async () => (await must(base, key, 'GET', `/v1/documents/${doc.document_id}`)).status === 'ready', 'the document to be ready')

  // The image's HEALTHCHECK, run as the engine would (podman runs it on a timer only with systemd).
  const hc = await podman(['healthcheck', 'run', `${PREFIX}-embedded`], { allowFail: true })
  check(hc.code === 0, 'the HEALTHCHECK passes on a running container', hc)
  note('HEALTHCHECK: healthy')

  // A second container on the same volume, while the first holds it: refused with the lock message.
  const t1 = performance.now()
  const second = await podman(['run', '--rm', '--name', `${PREFIX}-embedded-2`, '-v', `${volume}:/data`, APP_IMAGE], { allowFail: true })
  const said = `${second.out}\n${second.err}`
  check(second.code === 3 && /is in use by process \d+ of another PID namespace/.test(said), 'a second container on the same volume is refused (exit 3) with the lock message', said)
  note(`a second container on the volume: exit ${second.code} after ${Math.round(performance.now() - t1)} ms, "${/DATA_DIR [^"]*/.exec(said)?.[0]}"`)
  check((await fetch(`${base}/readyz`)).ok, 'the first container still serves after the second was refused')

  // SIGTERM: drained, exit 0.
  const stopped = performance.now()
  await podman(['stop', '-t', '30', `${PREFIX}-embedded`])
  const st = await state(`${PREFIX}-embedded`)
  const out = await logs(`${PREFIX}-embedded`)
  check(st.exitCode === 0 && out.includes('"msg":"stopped"'), 'SIGTERM drains and exits 0', { st, tail: out.split('\n').slice(-5) })
  note(`SIGTERM: exit 0 after ${Math.round(performance.now() - stopped)} ms`)

  await timeStart(() => podman(['start', `${PREFIX}-embedded`]), 'restart on the same volume')
  const again = await must(base, key, 'GET', `/v1/workspaces/${wsId}`)
  check(again.data.name === 'Survives restarts', 'the workspace is there after the restart', again)
  const search = await must(base, key, 'POST', `/v1/knowledge-bases/${kb.data.id}/search`, { query: 'where do containers keep data', top_k: 1 })
  check(search.results?.[0]?.document_id === doc.document_id, 'the document is searchable after the restart', search)
  await podman(['stop', '-t', '30', `${PREFIX}-embedded`])
  await podman(['rm', '-f', `${PREFIX}-embedded`])
  await podman(['volume', 'rm', '-f', volume])
}

// ---------------------------------------------------------------------------------------------
// 3 and 4. Server mode: the compose topology, chaos, then a rolling restart

interface Receiver {
  port: number
  /** Deliveries by webhook-id: how many attempts arrived, how many were answered 2xx. */
  seen: Map<string, { attempts: number; accepted: number }>
  /** While false, every delivery is answered 503 (the receiver is "down": deliveries retry). */
  up: boolean
  stop(): void
}

function receiver(): Receiver {
  const r: Receiver = {
    port: 0,
    seen: new Map(),
    up: true,
    stop: () => server.stop(true),
  }
  const server = Bun.serve({
    // The containers reach the host at their network's gateway (host.containers.internal).
    hostname: '0.0.0.0',
    port: 0,
    async fetch(req) {
      await req.text()
      const id = req.headers.get('webhook-id') ?? '?'
      const s = r.seen.get(id) ?? { attempts: 0, accepted: 0 }
      s.attempts++
      r.seen.set(id, s)
      if (!r.up) return new Response('down for the upgrade', { status: 503 })
      s.accepted++
      return Response.json({ ok: true })
    },
  })
  r.port = server.port!
  return r
}

interface Workload {
  workspace: string
  workflow: string
  webhook: string
  kb: string
}

const WAIT_SECONDS = 3

async function setUp(base: string, key: string, hook: string): Promise<Workload> {
  const workspace = (await must(base, key, 'POST', '/v1/workspaces', { name: 'Container check' })).data.id
  const webhook = (await must(base, key, 'POST', '/v1/webhooks', {
    workspace_id: workspace,
    url: hook,
    events: ['workflow.run.completed', 'knowledge.document.ready', 'webhook.test'],
    secret: 'whsec_container-check-0123456789',
  })).data.id
  const workflow = (await must(base, key, 'POST', '/v1/workflows', {
    workspace_id: workspace,
    name: 'Wait, then finish',
    graph: {
      nodes: [{ id: 'start', type: 'start', config: {} }, { id: 'pause', type: 'wait', config: { seconds: WAIT_SECONDS } }, { id: 'end', type: 'end', config: { outputs: { ok: 'yes' } } }],
      edges: [{ source: 'start', target: 'pause' }, { source: 'pause', target: 'end' }],
    },
  })).data.id
  const kb = (await must(base, key, 'POST', '/v1/knowledge-bases', { workspace_id: workspace, name: 'Check base', chunking: { chunk_size: 32, chunk_overlap: 0 } })).data.id
  return { workspace, workflow, webhook, kb }
}

/** Traffic through the proxy until stopped: a run, a document (20 chunks) and a ping per round. */
function traffic(base: string, key: string, w: Workload) {
  const accepted = { runs: [] as string[], documents: [] as string[], pings: [] as string[] }
  let unanswered = 0
  let stopped = false
  let n = 0
  const paragraphs = (k: number) => Array.from({ length: 20 }, (_, i) => `Note ${k}, part ${i}: parcels of round ${k} ship within ${i + 1} days of the order.`).join('\n\n')
  const loop = (async () => {
    while (!stopped) {
      n++
      const [run, doc, ping] = await Promise.all([
        call(base, key, 'POST', `/v1/workflows/${w.workflow}/runs?async=true`, { inputs: {} }),
        call(base, key, 'POST', `/v1/knowledge-bases/${w.kb}/documents`, { type: 'text', name: `note-${n}.txt`, content: paragraphs(n) }),
        call(base, key, 'POST', `/v1/webhooks/${w.webhook}/ping`),
      ])
      for (const r of [run, doc, ping]) if (r === null || r.status >= 500) unanswered++
      if (run?.status === 202) accepted.runs.push(run.body.run_id)
      if (doc?.status === 201) accepted.documents.push(doc.body.document_id)
      if (ping?.status === 202) accepted.pings.push(ping.body.data.id)
      // Pacing of the load (a round every ~100 ms), not a wait for anything.
      await Bun.sleep(100)
    }
  })()
  return {
    accepted,
    unanswered: () => unanswered,
    /** Resolves once `rounds` more runs were accepted than when called. */
    more: (rounds: number) => {
      const from = accepted.runs.length
      return waitFor(async () => accepted.runs.length >= from + rounds, `${rounds} more rounds of traffic accepted`, 60_000)
    },
    stop: async () => {
      stopped = true
      await loop
    },
  }
}

type Sql = ReturnType<typeof postgres>

/**
 * Every run, document and delivery the store holds reached its final state, once: one completion
 * event per run and each of its nodes completed once, one ready event per document with every chunk
 * once, one delivery per event and webhook, succeeded, seen by the receiver. `exactlyOnce`: the
 * deliveries (of this phase) that no receiver may have accepted twice (a graceful restart drains:
 * nothing is resent).
 */
async function settled(sql: Sql, rec: Receiver, accepted: { runs: string[]; documents: string[]; pings: string[] }, exactlyOnce: ((id: string) => boolean) | null, label: string) {
  const count = async (q: Promise<{ n: number }[]>) => (await q)[0]!.n
  // Runs whose worker was killed wait for their lease (15 s) to run out before another takes them.
  await waitFor(async () => (await count(sql`select count(*)::int as n from runs where status not in ('completed')`)) === 0, `${label}: every run to complete`, 120_000, 250)
  await waitFor(async () => (await count(sql`select count(*)::int as n from documents where status <> 'ready'`)) === 0, `${label}: every document to be ready`, 120_000, 250)
  await waitFor(
    async () =>
      (await count(sql`select count(*)::int as n from webhook_deliveries where status <> 'succeeded'`)) === 0 &&
      (await count(sql`select count(*)::int as n from events where dispatched_at is null`)) === 0,
    `${label}: every delivery to succeed`,
    120_000,
    250,
  )
  const runs = (await sql<{ id: string }[]>`select id from runs`).map((r) => r.id)
  const documents = (await sql<{ id: string }[]>`select id from documents`).map((d) => d.id)
  check(accepted.runs.every((id) => runs.includes(id)), `${label}: every accepted run is in the store`)
  check(accepted.documents.every((id) => documents.includes(id)), `${label}: every accepted document is in the store`)

  const completions = await sql<{ run_id: string; n: number }[]>`select data->>'run_id' as run_id, count(*)::int as n from events where type = 'workflow.run.completed' group by 1`
  check(completions.every((c) => c.n === 1) && completions.length === runs.length, `${label}: one completion event per run`, completions.filter((c) => c.n !== 1))
  const twice = await sql`select run_id, data->>'node_id' as node, count(*)::int as n from run_events where type = 'node_end' group by 1, 2 having count(*) > 1`
  check(twice.length === 0, `${label}: no node of any run completed twice`, [...twice])
  const [nodes] = await sql<{ n: number }[]>`select count(*)::int as n from run_events where type = 'node_end'`
  check(nodes!.n === runs.length * 3, `${label}: each run's three nodes completed once (${nodes!.n} for ${runs.length} runs)`)

  const readies = await sql<{ document_id: string; n: number }[]>`select data->>'document_id' as document_id, count(*)::int as n from events where type = 'knowledge.document.ready' group by 1`
  check(readies.every((r) => r.n === 1) && readies.length === documents.length, `${label}: one ready event per document`, readies.filter((r) => r.n !== 1))
  const chunks = await sql<{ id: string; chunks_count: number; n: number }[]>`
    select d.id, d.chunks_count, count(c.id)::int as n from documents d
    left join (select id, document_id, generation from chunks union all select id, document_id, generation from chunks_unindexed) c
      on c.document_id = d.id and c.generation = d.live_generation
    group by d.id, d.chunks_count`
  check(chunks.every((c) => c.n === c.chunks_count && c.n === 20), `${label}: every document's 20 chunks once`, chunks.filter((c) => c.n !== c.chunks_count || c.n !== 20))

  const [dupes] = await sql<{ n: number }[]>`select count(*)::int as n from (select 1 from webhook_deliveries group by event_id, webhook_id having count(*) > 1) d`
  check(dupes!.n === 0, `${label}: one delivery per event and webhook`)
  const deliveries = (await sql<{ id: string }[]>`select id from webhook_deliveries`).map((d) => d.id)
  const [events] = await sql<{ n: number }[]>`select count(*)::int as n from events where type in ('workflow.run.completed', 'knowledge.document.ready', 'webhook.test')`
  check(deliveries.length === events!.n, `${label}: a delivery for every event (${deliveries.length} deliveries, ${events!.n} events)`)
  check(deliveries.every((id) => (rec.seen.get(id)?.accepted ?? 0) >= 1), `${label}: the receiver accepted every delivery`, deliveries.filter((id) => !rec.seen.get(id)?.accepted))
  const acceptedTwice = deliveries.filter((id) => rec.seen.get(id)!.accepted > 1)
  if (exactlyOnce) check(acceptedTwice.filter(exactlyOnce).length === 0, `${label}: no delivery accepted twice`, acceptedTwice.filter(exactlyOnce))
  const attempts = deliveries.reduce((s, id) => s + rec.seen.get(id)!.attempts, 0)
  return { runs: runs.length, documents: documents.length, deliveries: deliveries.length, attempts, acceptedTwice: acceptedTwice.length, chunks: chunks.reduce((s, c) => s + c.n, 0) }
}

async function serverMode(): Promise<void> {
  step('server mode: stand-ins for the compose file\'s PostgreSQL, Redis and proxy images (Debian\'s packages)')
  await serviceImages()
  const key = generateKey()
  const rec = receiver()
  const env = {
    ...process.env,
    POSTGRES_IMAGE: SERVICE_IMAGES.postgres,
    REDIS_IMAGE: SERVICE_IMAGES.redis,
    PROXY_IMAGE: SERVICE_IMAGES.proxy,
    APP_IMAGE,
    SECRET_KEY: `check-${generateKey()}`,
    BOOTSTRAP_API_KEY: key,
    LOG_LEVEL: 'info',
  }
  const file = loadCompose(env)
  // The check's additions: deliveries to its receiver on this host (plain HTTP, a private address),
  // retried every few seconds rather than minutes.
  const hookEnv = { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WEBHOOK_RETRY_DELAYS_MS: '1000,2000,3000,5000,8000,13000,21000' }
  step('server mode: docker-compose.yml brought up (PostgreSQL, Redis, 2 API, 2 workers, the proxy)')
  const t0 = performance.now()
  const topo: Topology = await up(file, { extraEnv: { api: hookEnv, worker: hookEnv }, publish: { postgres: 5432 } })
  const base = `http://127.0.0.1:${topo.ports['proxy:8080']}`
  await waitFor(() => fetch(`${base}/readyz`).then((r) => r.ok), 'the proxy to answer /readyz', 90_000, 100)
  note(`compose topology up and ready through the proxy in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${Object.entries(topo.containers).map(([s, c]) => `${c.length} ${s}`).join(', ')}`)
  const sql = postgres(`postgres://agent:agent@127.0.0.1:${topo.ports['postgres:5432']}/agent`, { max: 2, onnotice: () => {} })
  try {
    const w = await setUp(base, key, `http://host.containers.internal:${rec.port}/hook`)

    step('chaos: traffic through the proxy while a worker container, then an API container, is SIGKILLed')
    const t = traffic(base, key, w)
    await t.more(10)
    for (const victim of [topo.containers.worker![0]!, topo.containers.api![0]!]) {
      const before = await state(victim)
      // SIGKILL to the container's process from outside the engine, as a crash or the OOM killer
      // would (`podman kill` marks the container stopped by its user, which no restart policy restarts).
      const pid = Number((await podman(['inspect', '--format', '{{.State.Pid}}', victim])).out)
      check(pid > 0, `${victim} has a process to kill`)
      process.kill(pid, 'SIGKILL')
      // The restart policy (unless-stopped) brings it back; started by hand if this engine does not.
      const back = await waitFor(async () => {
        const s = await state(victim)
        return s.status === 'running' && s.startedAt !== before.startedAt ? s : null
      }, `${victim} to be restarted by its restart policy`, 8_000, 200).catch(async () => {
        await podman(['start', victim])
        return null
      })
      note(`${victim} SIGKILLed; ${back ? `restarted by its policy (restart count ${back.restarts})` : 'restarted by hand (the policy did not)'}`)
      await t.more(10)
    }
    await t.stop()
    const chaos = await settled(sql, rec, t.accepted, null, 'after the SIGKILLs')
    note(`chaos: ${t.accepted.runs.length} runs, ${t.accepted.documents.length} documents, ${t.accepted.pings.length} pings accepted (${t.unanswered()} requests unanswered while a container died); in the store ${chaos.runs} runs, ${chaos.documents} documents (${chaos.chunks} chunks), ${chaos.deliveries} deliveries in ${chaos.attempts} attempts, ${chaos.acceptedTwice} accepted twice (a delivery cut off by a SIGKILL is resent: at least once)`)

    await rolling(topo, sql, rec, base, key, w)
  } finally {
    await sql.end({ timeout: 1 })
    rec.stop()
  }
}

async function rolling(topo: Topology, sql: Sql, rec: Receiver, base: string, key: string, w: Workload): Promise<void> {
  step('rolling restart: a new image version replaces the workers one by one, work in flight')
  const next = `${APP_IMAGE}-next`
  await appImage(next, 'check-next')
  const [from, to] = [await imageId(APP_IMAGE), await imageId(next)]
  check(from !== to, 'the new version is another image')
  // What is in the store now was settled above: the counts below are of this phase alone.
  const [counts] = await sql<{ runs: number; docs: number; deliveries: number }[]>`
    select (select count(*)::int from runs) as runs, (select count(*)::int from documents) as docs, (select count(*)::int from webhook_deliveries) as deliveries`
  const { runs: runsBefore, docs: docsBefore, deliveries: deliveriesBefore } = counts!
  const seenBefore = new Set(rec.seen.keys())
  // Deliveries fail (503) until the workers are replaced: they are retried across the restart.
  rec.up = false
  const t = traffic(base, key, w)
  await t.more(5)
  const workers = topo.containers.worker!
  for (const worker of workers) {
    const stopping = performance.now()
    await podman(['stop', '-t', '30', worker])
    const st = await state(worker)
    const out = await logs(worker)
    check(st.exitCode === 0 && out.includes('"msg":"stopped"'), `${worker}: SIGTERM drains and exits 0`, { st, tail: out.split('\n').slice(-8) })
    const drained = performance.now() - stopping
    await recreate(topo, worker, next)
    await waitFor(async () => (await logs(worker)).includes('workers running'), `${worker} on the new image to run its workers`, 30_000, 100)
    note(`${worker}: drained in ${Math.round(drained)} ms (exit 0), recreated on the new image`)
    await t.more(5)
  }
  rec.up = true
  await t.more(5)
  await t.stop()
  const running = await podman(['ps', '--filter', `name=^${PREFIX}-worker-`, '--format', '{{.Names}} {{.ImageID}}'])
  check(running.out.split('\n').every((l) => to.startsWith(l.split(' ')[1]!) || l.split(' ')[1] === to), 'every worker runs the new image', running.out)
  // Exactly once for this phase's deliveries (one the SIGKILLs above cut off may have been accepted twice then).
  const totals = await settled(sql, rec, t.accepted, (id) => !seenBefore.has(id), 'after the rolling restart')
  const retried = [...rec.seen].filter(([id, s]) => !seenBefore.has(id) && s.attempts > 1).length
  note(
    `rolling restart: ${t.accepted.runs.length} runs, ${t.accepted.documents.length} documents, ${t.accepted.pings.length} pings accepted during it; ` +
      `${totals.runs - runsBefore} runs completed once each, ${totals.documents - docsBefore} documents ready once each, ${totals.deliveries - deliveriesBefore} deliveries ` +
      `(${retried} retried across the restart), none lost, none accepted twice`,
  )
}

// The unnamed images there before the check: left alone (what it makes itself is removed at the end).
const danglingBefore = new Set(await danglingImages())
try {
  await cleanUp()
  // The image is built in every case (the other parts run it).
  if (parts.includes('image')) await theImage()
  else await debianBase().then(bunBase).then(() => appImage())
  if (parts.includes('embedded')) await embedded()
  if (parts.includes('server')) await serverMode()
  console.log(`\ncontainer check passed in ${since()}:\n${figures.map((f) => `- ${f}`).join('\n')}`)
} catch (err) {
  console.error(`\n${(err as Error).message}`)
  for (const c of (await podman(['ps', '-a', '--filter', `name=^${PREFIX}-`, '--format', '{{.Names}}'], { allowFail: true })).out.split('\n').filter(Boolean)) {
    console.error(`--- ${c}: ${JSON.stringify(await state(c))}\n${(await logs(c)).split('\n').slice(-15).join('\n')}`)
  }
  process.exitCode = 1
} finally {
  if (!keep) await cleanUp()
  // Its stages' images and those a rebuilt tag left unnamed, also with --keep (no container uses them).
  const removed = await removeDangling(danglingBefore)
  const left = (await danglingImages()).filter((id) => !danglingBefore.has(id))
  console.log(`${removed} unnamed image(s) the check made removed; ${left.length} left`)
  if (left.length) process.exitCode = 1
}
