/**
 * docker-compose.yml brought up with podman by the container check, service by service, from the file
 * itself: its images (through their variables), commands, environment, volumes, replicas, restart
 * policy, stop grace period, health checks and `depends_on` conditions. The check's own additions are
 * explicit: extra environment for the service's processes, ports published on loopback only (the
 * proxy's on a free port, PostgreSQL's so that the check can look at the store), and PREFIX on every
 * name. (`podman-compose` reads the file too, but the one in Debian bookworm ignores `replicas` and
 * health conditions; this is the same topology with both.)
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { REPO } from './images'
import { PREFIX, podman, state } from './podman'

interface Service {
  image: string
  command?: string[]
  environment?: Record<string, string | number | boolean | null> | string[]
  volumes?: string[]
  ports?: string[]
  depends_on?: string[] | Record<string, { condition?: string }>
  deploy?: { replicas?: number }
  healthcheck?: { test?: string[] | string; disable?: boolean; interval?: string; timeout?: string; retries?: number }
  restart?: string
  stop_grace_period?: string
}
interface ComposeFile {
  services: Record<string, Service>
  volumes?: Record<string, unknown>
}

/** `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}` and `$$`, as compose interpolates them. */
export function interpolate(text: string, env: Record<string, string | undefined>): string {
  return text.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}/g, (whole, name: string | undefined, op: string | undefined, arg: string | undefined) => {
    if (whole === '$$') return '$'
    const value = env[name!]
    const unset = op?.startsWith(':') ? !value : value === undefined
    if (op?.endsWith('-')) return unset ? arg! : value!
    if (op?.endsWith('?')) {
      if (unset) throw new Error(`docker-compose.yml: ${name} ${arg}`)
      return value!
    }
    return value ?? ''
  })
}

export function loadCompose(env: Record<string, string | undefined>): ComposeFile {
  return Bun.YAML.parse(interpolate(readFileSync(join(REPO, 'docker-compose.yml'), 'utf8'), env)) as ComposeFile
}

const seconds = (d: string | undefined, fallback: number) => {
  const m = d ? /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(d) : null
  if (!m) return fallback
  const n = Number(m[1])
  return m[2] === 'ms' ? n / 1000 : m[2] === 'm' ? n * 60 : n
}

function environment(s: Service): string[] {
  const env = s.environment ?? {}
  if (Array.isArray(env)) return env
  return Object.entries(env).map(([k, v]) => `${k}=${v ?? ''}`)
}

export interface Topology {
  file: ComposeFile
  /** Container names by service, one per replica. */
  containers: Record<string, string[]>
  /** The `podman run` arguments each container was created with (to make it again, on a new image). */
  runArgs: Record<string, string[]>
  network: string
  /** Host ports published on 127.0.0.1: the proxy's by its container port, PostgreSQL's. */
  ports: Record<string, number>
}

/** The order in which services start: each after what it depends on. */
function order(file: ComposeFile): string[] {
  const done: string[] = []
  const visit = (name: string, path: string[]) => {
    if (done.includes(name)) return
    if (path.includes(name)) throw new Error(`docker-compose.yml: a dependency cycle through ${name}`)
    const deps = file.services[name]!.depends_on ?? []
    for (const d of Array.isArray(deps) ? deps : Object.keys(deps)) visit(d, [...path, name])
    done.push(name)
  }
  for (const name of Object.keys(file.services)) visit(name, [])
  return done
}

/** Polls a container's compose health check (`CMD` / `CMD-SHELL`) until it passes. */
export async function waitHealthy(container: string, s: Service, timeoutMs = 60_000): Promise<void> {
  const test = s.healthcheck?.test
  if (!test || s.healthcheck?.disable) return
  const cmd = typeof test === 'string' ? ['sh', '-c', test] : test[0] === 'CMD-SHELL' ? ['sh', '-c', test.slice(1).join(' ')] : test[0] === 'CMD' ? test.slice(1) : test
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const r = await podman(['exec', container, ...cmd], { allowFail: true })
    if (r.code === 0) return
    const st = await state(container)
    if (st.status !== 'running' && st.status !== 'created' && st.status !== '') throw new Error(`${container} is ${st.status} (exit ${st.exitCode}) while waiting for its health check`)
    if (Date.now() > deadline) throw new Error(`${container}: its health check (${cmd.join(' ')}) did not pass within ${timeoutMs} ms: ${r.err || r.out}`)
    await Bun.sleep(250)
  }
}

export function freePort(): number {
  const s = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = s.port
  s.stop(true)
  return port
}

/**
 * Creates the network, volumes and containers of `file`, in dependency order, each waited for as
 * its dependants ask (`service_healthy`: its health check passes). `extraEnv` is added to the
 * services named in it; `images` replaces a service's image (its variable already did, for those
 * that have one); `publish` names the container ports of services to publish on 127.0.0.1.
 */
export async function up(
  file: ComposeFile,
  opts: { extraEnv?: Record<string, Record<string, string>>; publish?: Record<string, number>; only?: string[] } = {},
): Promise<Topology> {
  const network = `${PREFIX}-net`
  await podman(['network', 'create', network])
  for (const v of Object.keys(file.volumes ?? {})) await podman(['volume', 'create', `${PREFIX}-${v}`])
  const topo: Topology = { file, containers: {}, runArgs: {}, network, ports: {} }
  for (const name of order(file)) {
    if (opts.only && !opts.only.includes(name)) continue
    const s = file.services[name]!
    const deps = s.depends_on ?? []
    // Wait for what this service depends on, as its conditions say.
    for (const [dep, cond] of Array.isArray(deps) ? deps.map((d) => [d, {}] as const) : Object.entries(deps)) {
      for (const c of topo.containers[dep] ?? []) {
        if ((cond as { condition?: string }).condition === 'service_healthy') await waitHealthy(c, file.services[dep]!)
      }
    }
    const replicas = s.deploy?.replicas ?? 1
    topo.containers[name] = []
    for (let i = 1; i <= replicas; i++) {
      const container = `${PREFIX}-${name}-${i}`
      const args = ['--name', container, '--network', network, '--network-alias', name, '--hostname', container]
      for (const e of [...environment(s), ...Object.entries(opts.extraEnv?.[name] ?? {}).map(([k, v]) => `${k}=${v}`)]) args.push('-e', e)
      for (const v of s.volumes ?? []) args.push('-v', v.includes(':') && !v.startsWith('/') && !v.startsWith('.') ? `${PREFIX}-${v}` : v)
      if (s.restart) args.push('--restart', s.restart)
      if (s.stop_grace_period) args.push('--stop-timeout', String(Math.ceil(seconds(s.stop_grace_period, 10))))
      if (s.healthcheck?.disable) args.push('--no-healthcheck')
      for (const p of s.ports ?? []) {
        const containerPort = Number(String(p).split(':').pop())
        const hostPort = freePort()
        args.push('-p', `127.0.0.1:${hostPort}:${containerPort}`)
        topo.ports[`${name}:${containerPort}`] = hostPort
      }
      const extra = opts.publish?.[name]
      if (extra !== undefined && i === 1) {
        const hostPort = freePort()
        args.push('-p', `127.0.0.1:${hostPort}:${extra}`)
        topo.ports[`${name}:${extra}`] = hostPort
      }
      args.push(s.image, ...(s.command ?? []))
      topo.runArgs[container] = args
      await podman(['run', '-d', ...args])
      topo.containers[name].push(container)
    }
  }
  return topo
}

/** The same container made again from its `podman run` arguments, on another image. */
export async function recreate(topo: Topology, container: string, image: string): Promise<void> {
  const args = [...topo.runArgs[container]!]
  const s = topo.file.services[container.slice(PREFIX.length + 1).replace(/-\d+$/, '')]!
  // The image is the argument before the command.
  args[args.length - (s.command?.length ?? 0) - 1] = image
  await podman(['rm', '-f', container])
  await podman(['run', '-d', ...args])
  topo.runArgs[container] = args
}
