import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { chain, end, start, startRunsEnv, tpl, wait, type RunsEnv } from '../helpers/runs'
import { keyFor, workspaceOf, type Answer } from '../helpers/harness'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The run object answered flat by get and cancel, and GET /v1/runs: every run the caller can read,
 * across workflows and workspaces (docs/api.md, "Runs" and "Lists").
 */

let env: RunsEnv

beforeAll(async () => {
  env = await startRunsEnv()
}, 60_000)
afterAll(() => env.close())

const RUN_FIELDS = ['created_at', 'duration_ms', 'finished_at', 'inputs', 'outputs', 'parent_run_id', 'run_id', 'status', 'usage', 'user_id', 'waiting', 'workflow_id', 'workflow_version']

describe('the run object', () => {
  test('GET /v1/runs/{id}: the run flat beside request_id, field by field, never in data', async () => {
    const wf = await env.workflow(chain(start([{ name: 'who', type: 'string' }]), tpl('greet', 'hi {{inputs.who}}'), end({ text: '{{nodes.greet.output.text}}' })))
    const ran = await env.trigger(wf, { who: 'Ada' })
    expect(ran.body.status).toBe('completed')
    const res = await env.h.call('GET', `/v1/runs/${ran.body.run_id}`, { key: env.owner })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['request_id', ...RUN_FIELDS].sort())
    expect(res.body.data).toBeUndefined()
    expect(res.body.request_id).toBe(res.headers.get('x-request-id'))
    expect(res.body).toMatchObject({
      run_id: ran.body.run_id,
      workflow_id: wf,
      workflow_version: 1,
      status: 'completed',
      inputs: { who: 'Ada' },
      outputs: { text: 'hi Ada' },
      usage: { tokens_in: 0, tokens_out: 0, credits: 0 },
      user_id: 'runs-owner',
      parent_run_id: null,
      waiting: null,
    })
    expect(res.body.duration_ms).toBeInteger()
    expect(Date.parse(res.body.created_at)).toBeLessThanOrEqual(Date.parse(res.body.finished_at))
  })

  test('POST /v1/runs/{id}/cancel: the cancelled run, flat', async () => {
    const wf = await env.workflow(chain(start(), wait('pause', 30), end({})))
    const runId = (await env.trigger(wf, {}, { async: true })).body.run_id
    const res = await env.h.call('POST', `/v1/runs/${runId}/cancel`, { key: env.owner })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['request_id', ...RUN_FIELDS].sort())
    expect(res.body).toMatchObject({ run_id: runId, workflow_id: wf, status: 'cancelled', parent_run_id: null, waiting: null, outputs: {} })
    expect(res.body.finished_at).toEqual(expect.any(String))
  })

  test('a failed run carries error beside the other fields', async () => {
    const wf = await env.workflow(chain(start(), { id: 'call', type: 'http_request', config: { method: 'GET', url: 'http://127.0.0.1:1/nothing' } }, end({})))
    const ran = await env.trigger(wf)
    expect(ran.body.status).toBe('failed')
    const res = await env.h.call('GET', `/v1/runs/${ran.body.run_id}`, { key: env.owner })
    expect(Object.keys(res.body).sort()).toEqual(['error', 'request_id', ...RUN_FIELDS].sort())
    expect(res.body.error).toMatchObject({ code: expect.any(String), message: expect.any(String), node: 'call' })
  })

  test('the items of GET /v1/workflows/{id}/runs are the same object', async () => {
    const wf = await env.workflow(chain(start(), tpl('a', 'x'), end({})))
    const ran = await env.trigger(wf)
    const list = await env.h.call('GET', `/v1/workflows/${wf}/runs`, { key: env.owner })
    const single = await env.h.call('GET', `/v1/runs/${ran.body.run_id}`, { key: env.owner })
    const { request_id: _, ...run } = single.body
    expect(list.body.data).toEqual([run])
  })
})

describe('GET /v1/runs: every run the caller can read', () => {
  // A user of its own in two workspaces, a readonly member of the first, and the outsider's run.
  let lister: string
  let wsA: string
  let wsB: string
  let wfA: string
  let wfB: string
  const runsA: string[] = []
  const runsB: string[] = []
  let failedA: string
  let outsiderRun: string

  const workspaceWorkflow = async (key: string, ws: string, name: string, graph = chain(start(), tpl('a', 'x'), end({}))) => {
    const res = await env.h.call('POST', '/v1/workflows', { key, body: { workspace_id: ws, name, graph } })
    expect(res.status).toBe(201)
    return res.body.data.id as string
  }
  const run = async (key: string, wf: string, user_id?: string) => {
    const res = await env.h.call('POST', `/v1/workflows/${wf}/runs`, { key, body: { inputs: {}, ...(user_id ? { user_id } : {}) } })
    expect(res.status).toBe(200)
    return res.body.run_id as string
  }
  const list = (key: string, query = '') => env.h.call('GET', `/v1/runs${query ? `?${query}` : ''}`, { key })
  const idsOf = (res: Answer) => {
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'request_id'])
    return res.body.data.map((r: { run_id: string }) => r.run_id) as string[]
  }
  const sorted = (ids: string[]) => [...ids].sort()

  beforeAll(async () => {
    lister = await keyFor(env.h, 'runs-lister')
    wsA = await workspaceOf(env.h, lister, 'Lister A')
    wsB = await workspaceOf(env.h, lister, 'Lister B')
    const added = await env.h.call('POST', `/v1/workspaces/${wsA}/members`, { key: lister, body: { user_id: 'runs-reader', role: 'readonly' } })
    expect(added.status).toBe(201)
    wfA = await workspaceWorkflow(lister, wsA, 'A')
    wfB = await workspaceWorkflow(lister, wsB, 'B')
    const failing = await workspaceWorkflow(lister, wsA, 'A failing', chain(start(), { id: 'call', type: 'http_request', config: { method: 'GET', url: 'http://127.0.0.1:1/nothing' } }, end({})))
    for (let i = 0; i < 3; i++) runsA.push(await run(lister, wfA, i === 0 ? 'end-user-1' : undefined))
    failedA = await run(lister, failing)
    runsA.push(failedA)
    for (let i = 0; i < 2; i++) runsB.push(await run(lister, wfB))
    const elsewhere = await workspaceOf(env.h, env.outsider, 'Outsider runs')
    outsiderRun = await run(env.outsider, await workspaceWorkflow(env.outsider, elsewhere, 'O'))
  })

  test('no parameters, a user in two workspaces: the runs of both, newest first, flat items', async () => {
    const res = await list(lister)
    const ids = idsOf(res)
    expect(ids).toEqual([...runsA, ...runsB].reverse())
    for (let i = 1; i < res.body.data.length; i++) expect(res.body.data[i - 1].created_at >= res.body.data[i].created_at).toBe(true)
    expect(Object.keys(res.body.data[0]).sort()).toEqual(RUN_FIELDS)
    expect(res.body).toMatchObject({ has_more: false, next_cursor: null })
  })

  test('root sees every workspace\'s runs; a key restricted to a workspace only its own', async () => {
    const all = idsOf(await list(env.h.rootKey, 'limit=100'))
    for (const id of [...runsA, ...runsB, outsiderRun]) expect(all).toContain(id)
    const restricted = await keyFor(env.h, 'runs-lister', { workspace_id: wsB })
    expect(sorted(idsOf(await list(restricted)))).toEqual(sorted(runsB))
    // Restricted to a workspace its user is no member of: it can read nothing, so it lists nothing.
    const stranger = await keyFor(env.h, 'runs-stranger', { workspace_id: wsA })
    expect(idsOf(await list(stranger))).toEqual([])
  })

  test('workspace_id is a filter; a workspace the caller cannot read is 404', async () => {
    expect(sorted(idsOf(await list(lister, `workspace_id=${wsB}`)))).toEqual(sorted(runsB))
    const header = await env.h.call('GET', '/v1/runs', { key: lister, headers: { 'x-workspace-id': wsA } })
    expect(sorted(idsOf(header))).toEqual(sorted(runsA))
    const theirs = await list(env.outsider, `workspace_id=${wsA}`)
    expect(theirs.status).toBe(404)
    expect(theirs.body.error.code).toBe('not_found')
    expect(idsOf(await list(env.outsider))).toEqual([outsiderRun])
  })

  test('a readonly member of one workspace sees its runs, not another workspace\'s', async () => {
    const seen = idsOf(await list(env.reader, 'limit=100'))
    for (const id of runsA) expect(seen).toContain(id)
    for (const id of [...runsB, outsiderRun]) expect(seen).not.toContain(id)
    expect((await list(env.reader, `workspace_id=${wsB}`)).status).toBe(404)
  })

  test('filters: status, status_in, workflow_id, user_id, created_at_after/_before', async () => {
    expect(idsOf(await list(lister, 'status=failed'))).toEqual([failedA])
    expect(sorted(idsOf(await list(lister, 'status_in=failed,completed')))).toEqual(sorted([...runsA, ...runsB]))
    expect(idsOf(await list(lister, 'status=running'))).toEqual([])
    expect(sorted(idsOf(await list(lister, `workflow_id=${wfB}`)))).toEqual(sorted(runsB))
    expect(sorted(idsOf(await list(lister, `workflow_id_in=${wfA},${wfB}&status=completed`)))).toEqual(sorted([...runsA.filter((r) => r !== failedA), ...runsB]))
    expect(idsOf(await list(lister, 'user_id=end-user-1'))).toEqual([runsA[0]!])
    const first = (await env.h.call('GET', `/v1/runs/${runsA[0]}`, { key: lister })).body
    const last = (await env.h.call('GET', `/v1/runs/${runsB[1]}`, { key: lister })).body
    expect(idsOf(await list(lister, `created_at_after=${first.created_at}&created_at_before=${last.created_at}&sort=created_at`))).toEqual([...runsA.slice(1), runsB[0]!])
    const bad = await list(lister, 'status=sleeping')
    expect(bad.status).toBe(400)
    expect(bad.body.error).toMatchObject({ code: 'invalid_filter', param: 'status' })
    expect((await list(lister, 'workspace=x')).body.error).toMatchObject({ code: 'invalid_filter', param: 'workspace' })
  })

  test('pagination across workspaces: every run once, in order, ties broken by id, both directions', async () => {
    const everything = [...runsA, ...runsB]
    for (const sort of ['-created_at', 'created_at', '-finished_at', 'finished_at']) {
      const pages: string[][] = []
      let cursor: string | null = null
      do {
        const res: Answer = await list(lister, `limit=2&sort=${sort}${cursor ? `&cursor=${cursor}` : ''}`)
        pages.push(idsOf(res))
        expect(res.body.has_more).toBe(res.body.next_cursor !== null)
        cursor = res.body.next_cursor
        expect(pages.length).toBeLessThan(10)
      } while (cursor)
      expect(pages.map((p) => p.length)).toEqual([2, 2, 2])
      const seen = pages.flat()
      const whole = idsOf(await list(lister, `limit=100&sort=${sort}`))
      expect([sort, seen]).toEqual([sort, whole])
      expect(sorted(seen)).toEqual(sorted(everything))
    }
    expect(idsOf(await list(lister, 'sort=created_at'))).toEqual(everything)
    const wrong = await list(lister, 'sort=status')
    expect(wrong.body.error).toMatchObject({ code: 'invalid_sort', param: 'sort' })
  })

  test('sorted by finished_at, running runs (finished_at null) count as the latest and pages cross them', async () => {
    const parked = await workspaceWorkflow(lister, wsB, 'B waiting', chain(start(), wait('pause', 60), end({})))
    const running: string[] = []
    for (let i = 0; i < 3; i++) {
      const res = await env.h.call('POST', `/v1/workflows/${parked}/runs?async=true`, { key: lister, body: {} })
      expect(res.status).toBe(202)
      running.push(res.body.run_id)
    }
    try {
      const finished = [...runsA, ...runsB]
      for (const sort of ['-finished_at', 'finished_at']) {
        const seen: { run_id: string; finished_at: string | null }[] = []
        let cursor: string | null = null
        do {
          const res: Answer = await list(lister, `limit=2&sort=${sort}${cursor ? `&cursor=${cursor}` : ''}`)
          expect([sort, res.status]).toEqual([sort, 200])
          seen.push(...res.body.data)
          cursor = res.body.next_cursor
          expect(seen.length).toBeLessThan(20)
        } while (cursor)
        expect(sorted(seen.map((r) => r.run_id))).toEqual(sorted([...finished, ...running]))
        // Descending: the running ones first (newest id first among equals); ascending: last.
        const nulls = seen.map((r) => r.finished_at === null)
        expect(nulls).toEqual(sort === '-finished_at' ? [true, true, true, ...finished.map(() => false)] : [...finished.map(() => false), true, true, true])
        const runningSeen = seen.filter((r) => r.finished_at === null).map((r) => r.run_id)
        expect(runningSeen).toEqual(sort === '-finished_at' ? [...running].reverse() : running)
      }
    } finally {
      for (const id of running) expect((await env.h.call('POST', `/v1/runs/${id}/cancel`, { key: lister })).status).toBe(200)
    }
  })
})
