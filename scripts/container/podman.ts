/**
 * Podman as the container check drives it (docs/deployment.md, "The container check"): the machine's
 * podman with the runtime flags that work where there is no systemd (runc, cgroupfs; PODMAN_FLAGS
 * replaces them) and a containers.conf without default ulimits (CONTAINERS_CONF, when set, is used
 * as it is). Everything the check makes is named with PREFIX, so a run cleans up what an earlier,
 * interrupted one left.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export const PREFIX = 'apcheck'
const FLAGS = (process.env.PODMAN_FLAGS ?? '--runtime runc --cgroup-manager cgroupfs').split(/\s+/).filter(Boolean)

function containersConf(): string {
  if (process.env.CONTAINERS_CONF) return process.env.CONTAINERS_CONF
  const file = join(mkdtempSync(join(tmpdir(), 'apcheck-conf-')), 'containers.conf')
  writeFileSync(file, '[containers]\ndefault_ulimits = []\n')
  return file
}
const ENV = { ...process.env, CONTAINERS_CONF: containersConf() }

/** Lines podman prints on every call on a machine without systemd or syslog: not worth showing. */
const NOISE = /unable to get systemd connection|failed to connect to syslog|level=warning msg="The cgroupv2 manager/

export interface Result {
  code: number
  out: string
  err: string
}

/** Runs podman; a non-zero exit throws with what it said, unless `allowFail`. */
export async function podman(args: string[], opts: { allowFail?: boolean; stdin?: Blob | ReadableStream; quiet?: boolean } = {}): Promise<Result> {
  const proc = Bun.spawn(['podman', ...FLAGS, ...args], { env: ENV, stdin: opts.stdin ?? 'ignore', stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  const said = err
    .split('\n')
    .filter((l) => l && !NOISE.test(l))
    .join('\n')
  if (code !== 0 && !opts.allowFail) throw new Error(`podman ${args.join(' ')} exited ${code}\n${said}\n${out.slice(-2000)}`)
  return { code, out: out.trim(), err: said }
}

/**
 * A build: each of its steps printed as it starts (a build runs for minutes, and a CI log that says
 * nothing meanwhile looks hung), and on failure its last lines.
 */
export async function build(args: string[]): Promise<void> {
  const began = performance.now()
  const proc = Bun.spawn(['podman', ...FLAGS, 'build', '--network=host', '--format', 'docker', ...args], { env: ENV, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  const tail: string[] = []
  const seconds = () => ((performance.now() - began) / 1000).toFixed(0)
  let step = 'the build'
  let stepAt = began
  const read = async (stream: ReadableStream<Uint8Array>) => {
    for await (const line of lines(stream)) {
      if (NOISE.test(line)) continue
      tail.push(line)
      if (tail.length > 30) tail.shift()
      // A multi-stage build numbers its stages too: "[2/3] STEP 4/7: RUN ...".
      if (/^(\[\d+\/\d+\] )?STEP \d+\/\d+: /.test(line)) {
        step = line.slice(0, 60)
        stepAt = performance.now()
        console.log(`   ${line.slice(0, 160)} (${seconds()} s)`)
      }
    }
  }
  // One step can take minutes (a package install): still at it, every 30 s of it.
  const timer = setInterval(() => {
    if (performance.now() - stepAt >= 29_000) console.log(`   ... ${step} (${seconds()} s)`)
  }, 30_000)
  const [code] = await Promise.all([proc.exited, read(proc.stdout), read(proc.stderr)]).finally(() => clearInterval(timer))
  if (code !== 0) throw new Error(`podman build ${args.join(' ')} failed:\n${tail.join('\n')}`)
}

async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder()
  let buffered = ''
  for await (const chunk of stream) {
    buffered += decoder.decode(chunk, { stream: true })
    const parts = buffered.split('\n')
    buffered = parts.pop()!
    yield* parts
  }
  if (buffered) yield buffered
}

/**
 * `work`, with a line every `everyMs` while it lasts (a step that prints nothing of its own, such as
 * debootstrap or a wait for containers to settle), so that a CI log shows the check is alive.
 */
export async function alive<T>(what: string, work: Promise<T>, everyMs = 30_000): Promise<T> {
  const began = performance.now()
  const timer = setInterval(() => console.log(`   ... ${what} (${((performance.now() - began) / 1000).toFixed(0)} s)`), everyMs)
  try {
    return await work
  } finally {
    clearInterval(timer)
  }
}

/** The ids of the images with neither a name nor a child: what `podman images` lists as `<none>`. */
export async function danglingImages(): Promise<string[]> {
  const r = await podman(['images', '--filter', 'dangling=true', '--quiet', '--no-trunc'], { allowFail: true })
  return r.out.split('\n').filter(Boolean)
}

/**
 * Removes the unnamed images the check made: those of its builds' stages (deps, build) and the
 * images a rebuilt tag left behind, none that were there before it began (`before`). Removing one
 * can leave its parent layer unnamed and childless in turn: repeated until none is new.
 */
export async function removeDangling(before: Set<string>): Promise<number> {
  let removed = 0
  for (let round = 0; round < 10; round++) {
    const made = (await danglingImages()).filter((id) => !before.has(id))
    if (made.length === 0) break
    // Not --force: an image a container still uses (--keep) stays.
    await podman(['rmi', ...made], { allowFail: true })
    removed += made.length
  }
  return removed
}

export const imageExists = async (ref: string) => (await podman(['image', 'exists', ref], { allowFail: true })).code === 0

/** The image's size in bytes, as `podman images` counts it (uncompressed layers). */
export async function imageSize(ref: string): Promise<number> {
  return Number((await podman(['image', 'inspect', '--format', '{{.Size}}', ref])).out)
}

export async function imageId(ref: string): Promise<string> {
  return (await podman(['image', 'inspect', '--format', '{{.Id}}', ref])).out
}

/** A container's state: running, exited, ... ('' when there is none). */
export async function state(name: string): Promise<{ status: string; exitCode: number; restarts: number; startedAt: string }> {
  const r = await podman(['inspect', '--format', '{{.State.Status}}|{{.State.ExitCode}}|{{.RestartCount}}|{{.State.StartedAt}}', name], { allowFail: true })
  if (r.code !== 0) return { status: '', exitCode: -1, restarts: 0, startedAt: '' }
  const [status, exitCode, restarts, startedAt] = r.out.split('|')
  return { status: status!, exitCode: Number(exitCode), restarts: Number(restarts), startedAt: startedAt! }
}

export async function logs(name: string): Promise<string> {
  const r = await podman(['logs', name], { allowFail: true })
  return `${r.out}\n${r.err}`
}

/** Removes every container, then network and volume, whose name starts with PREFIX. */
export async function cleanUp(): Promise<void> {
  const names = (kind: string, format: string) =>
    podman([kind, 'ls', ...(kind === 'container' ? ['-a'] : []), '--format', format], { allowFail: true }).then((r) =>
      r.out.split('\n').filter((n) => n.startsWith(PREFIX)),
    )
  const containers = await names('container', '{{.Names}}')
  if (containers.length) await podman(['rm', '-f', '-t', '0', ...containers], { allowFail: true })
  const networks = await names('network', '{{.Name}}')
  if (networks.length) await podman(['network', 'rm', '-f', ...networks], { allowFail: true })
  const volumes = await names('volume', '{{.Name}}')
  if (volumes.length) await podman(['volume', 'rm', '-f', ...volumes], { allowFail: true })
}
