import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from '../helpers/harness'
import { EMBEDDED, freePort, killAll, runToExit, spawnProcess, spawnService } from '../helpers/process'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The service's process and DATA_DIR's lock (docs/deployment.md): `bun start` is a launcher with
 * the service as its child, and a lock holder may exist for a while after it was killed. Real
 * subprocesses on the embedded default.
 */

let tmp: string
/** Service pids that are not our own children (the launcher's): killed by pid if a test left one. */
const grandchildren = new Set<number>()

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'ap-e2e-launcher-'))
})

afterAll(async () => {
  for (const pid of grandchildren) if (!gone(pid)) process.kill(pid, 'SIGKILL')
  await killAll()
  for (const pid of grandchildren) await waitFor(() => gone(pid), { what: `pid ${pid} to be gone` })
  rmSync(tmp, { recursive: true, force: true })
})

/** /proc/<pid>/stat fields after the command name: [state, ppid, ...]; null once the pid is gone. */
function stat(pid: number): string[] | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return text.slice(text.lastIndexOf(')') + 2).split(' ')
  } catch {
    return null
  }
}
const gone = (pid: number) => {
  const s = stat(pid)
  return s === null || s[0] === 'Z'
}
const startTime = (pid: number) => stat(pid)![19]!
const lockHolder = (dataDir: string) => Number(readFileSync(join(dataDir, 'pglite.lock'), 'utf8').split('\n')[0])

/** A DATA_DIR of the test's own (a fresh one starts from the migrated template: a copy), so that tests can run together. */
let dataDirs = 0
function dataDirOf(): string {
  const dir = join(tmp, `data-${++dataDirs}`)
  mkdirSync(dir, { recursive: true })
  return dir
}

describe('the `bun start` launcher', () => {
  test('SIGKILLed: the service shuts down as for SIGTERM, releases DATA_DIR, and the next start succeeds', async () => {
    const dataDir = dataDirOf()
    const port = freePort()
    const launcher = spawnProcess(['bun', 'start'], { ...EMBEDDED, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info' })
    await launcher.waitForOutput(/listening on/, 30_000)
    const service = lockHolder(dataDir)
    grandchildren.add(service)
    // The launcher is a process of its own, the service its child.
    expect(service).not.toBe(launcher.proc.pid)
    expect(Number(stat(service)![1])).toBe(launcher.proc.pid)
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200)

    launcher.proc.kill('SIGKILL')
    await waitFor(() => gone(service), { timeoutMs: 15_000, what: 'the service to exit after its launcher' })
    expect(existsSync(join(dataDir, 'pglite.lock'))).toBe(false)
    // The service held the launcher's stdout: the output ends once the service is gone.
    await launcher.exited
    expect(launcher.output()).toContain('the launcher (bun start) has exited; shutting down')
    expect(launcher.output()).toContain('"stopped"')

    // Watched too, with this test process as its parent, which stays: it serves until told to stop.
    const next = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir, EXIT_WITH_LAUNCHER: 'true' } })
    await next.ready(30_000)
    expect(lockHolder(dataDir)).toBe(next.proc.pid)
    expect((await fetch(`${next.url}/healthz`)).status).toBe(200)
    expect(await next.stop()).toBe(0)
    expect(next.output()).not.toContain('has exited; shutting down')
  }, 60_000)
})

// Each with its own data directory and holder, mostly waiting on processes: run together.
describe.concurrent('a DATA_DIR lock held by another process', () => {
  test('a holder that is exiting (a zombie) is waited for, and the start goes on once it is gone', async () => {
    const dataDir = dataDirOf()
    // `sleep 0.1 &` exits at once, and its parent, replaced by `exec sleep 60`, never wait()s for it:
    // a real zombie, as long as that parent lives.
    const parent = spawnProcess(['sh', '-c', 'sleep 0.1 & echo $!; exec sleep 60'])
    const zombie = Number((await parent.waitForOutput(/^(\d+)$/m))[1])
    await waitFor(() => stat(zombie)?.[0] === 'Z', { what: `pid ${zombie} to be a zombie` })
    writeFileSync(join(dataDir, 'pglite.lock'), `${zombie}\n${startTime(zombie)}\n`)

    const sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir, DATA_DIR_LOCK_WAIT_MS: '30000' } })
    await sp.waitForOutput(new RegExp(`waiting for pid ${zombie} \\(exiting\\) to release DATA_DIR ${dataDir}`), 20_000)
    expect(sp.proc.exitCode).toBeNull()
    // Its parent goes; init adopts the zombie and reaps it.
    await parent.stop('SIGKILL')
    await sp.ready(30_000)
    expect(lockHolder(dataDir)).toBe(sp.proc.pid)
    expect(await sp.stop()).toBe(0)
  }, 60_000)

  test('a zombie nobody reaps is taken over after DATA_DIR_LOCK_WAIT_MS (it has closed its files)', async () => {
    const dataDir = dataDirOf()
    const parent = spawnProcess(['sh', '-c', 'sleep 0.1 & echo $!; exec sleep 60'])
    const zombie = Number((await parent.waitForOutput(/^(\d+)$/m))[1])
    await waitFor(() => stat(zombie)?.[0] === 'Z', { what: `pid ${zombie} to be a zombie` })
    writeFileSync(join(dataDir, 'pglite.lock'), `${zombie}\n`)

    const sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir, DATA_DIR_LOCK_WAIT_MS: '300' } })
    await sp.ready(30_000)
    expect(sp.output()).toContain(`waiting for pid ${zombie} (exiting)`)
    expect(stat(zombie)?.[0]).toBe('Z')
    expect(lockHolder(dataDir)).toBe(sp.proc.pid)
    expect(await sp.stop()).toBe(0)
    await parent.stop('SIGKILL')
  }, 60_000)

  test('a live holder that is not exiting is refused at once with exit code 3, with or without its start time', async () => {
    const dataDir = dataDirOf()
    const holder = spawnProcess(['sleep', '60'])
    await waitFor(() => stat(holder.proc.pid)?.[0] === 'S', { what: 'sleep to be sleeping' })
    for (const lock of [`${holder.proc.pid}\n${startTime(holder.proc.pid)}\n`, `${holder.proc.pid}\n`]) {
      writeFileSync(join(dataDir, 'pglite.lock'), lock)
      const began = Date.now()
      const { code, output } = await runToExit({ env: { ...EMBEDDED, DATA_DIR: dataDir, DATA_DIR_LOCK_WAIT_MS: '30000' } })
      expect(code).toBe(3)
      expect(output).toContain(`DATA_DIR ${dataDir} is in use by process ${holder.proc.pid}`)
      expect(output).not.toContain('waiting for pid')
      // Not after the 30 s wait: a healthy holder will not let go.
      expect(Date.now() - began).toBeLessThan(15_000)
      expect(readFileSync(join(dataDir, 'pglite.lock'), 'utf8')).toBe(lock)
    }
    await holder.stop('SIGKILL')
  }, 60_000)

  test('a pid now used by another program (its start time differs from the lock\'s) does not block', async () => {
    const dataDir = dataDirOf()
    const stranger = spawnProcess(['sleep', '60'])
    await waitFor(() => stat(stranger.proc.pid) !== null, { what: 'sleep to start' })
    writeFileSync(join(dataDir, 'pglite.lock'), `${stranger.proc.pid}\n${Number(startTime(stranger.proc.pid)) - 1}\n`)
    const sp = spawnService({ env: { ...EMBEDDED, DATA_DIR: dataDir } })
    await sp.ready(30_000)
    expect(lockHolder(dataDir)).toBe(sp.proc.pid)
    expect(stat(stranger.proc.pid)?.[0]).toBe('S')
    expect(await sp.stop()).toBe(0)
    await stranger.stop('SIGKILL')
  }, 60_000)
})

/** Whether this machine lets us start a process in a PID namespace of its own (root, as in CI and containers). */
const canUnshare = Bun.spawnSync(['unshare', '--pid', '--fork', '--mount-proc', 'true']).exitCode === 0

/**
 * Two containers on one volume: each service is pid 1 (or some small pid) of its own PID namespace,
 * so the pid in the lock names nothing the other can look up. Real namespaces here (`unshare`), the
 * same as a container runtime makes: the lock's flock, held by the holder for its life, decides.
 */
describe.skipIf(!canUnshare)('a DATA_DIR lock held from another PID namespace (another container on the same volume)', () => {
  const inNamespace = (dataDir: string, port: number) =>
    spawnProcess(['unshare', '--pid', '--fork', '--mount-proc', '--kill-child', 'bun', 'run', 'src/main.ts'], {
      ...EMBEDDED,
      DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: String(port),
      LOG_LEVEL: 'info',
      DATA_DIR_LOCK_WAIT_MS: '30000',
    })
  const healthy = (port: number) => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)

  test('a live holder is refused within seconds, not after DATA_DIR_LOCK_WAIT_MS; once it is killed, the next start takes over', async () => {
    const dataDir = dataDirOf()
    const firstPort = freePort()
    const first = inNamespace(dataDir, firstPort)
    await waitFor(() => healthy(firstPort), { timeoutMs: 30_000, what: 'the first service (in its own PID namespace) to answer' })
    const lock = readFileSync(join(dataDir, 'pglite.lock'), 'utf8').split('\n')
    // Its pid as it sees it (1: the namespace's init), its own namespace and host.
    expect(lock[0]).toBe('1')
    expect(lock[2]).toMatch(/^pid:\[\d+\] \S+$/)

    const began = Date.now()
    const second = inNamespace(dataDir, freePort())
    expect(await second.exited).toBe(3)
    expect(second.output()).toContain(`DATA_DIR ${dataDir} is in use by process 1 of another PID namespace`)
    expect(Date.now() - began).toBeLessThan(15_000)
    // Refused, it left the holder's lock and database alone.
    expect(readFileSync(join(dataDir, 'pglite.lock'), 'utf8').split('\n')).toEqual(lock)
    expect(await healthy(firstPort)).toBe(true)

    // The holder dies without a word (its lock file stays); a start in a third namespace takes over.
    await first.stop('SIGKILL')
    expect(existsSync(join(dataDir, 'pglite.lock'))).toBe(true)
    const thirdPort = freePort()
    const third = inNamespace(dataDir, thirdPort)
    await waitFor(() => healthy(thirdPort), { timeoutMs: 30_000, what: 'a start after the holder was killed to answer' })
    expect(third.output()).not.toContain('in use by process')
    // SIGTERM to the service itself (unshare would answer it by SIGKILLing its child): a clean stop, and unshare exits with its code.
    const service = Number(readFileSync(`/proc/${third.proc.pid}/task/${third.proc.pid}/children`, 'utf8').trim().split(/\s+/)[0])
    process.kill(service, 'SIGTERM')
    expect(await third.exited).toBe(0)
    expect(existsSync(join(dataDir, 'pglite.lock'))).toBe(false)
  }, 90_000)
})
