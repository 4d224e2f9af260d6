/**
 * The images the container check builds (docs/deployment.md, "The container check"), each only when
 * missing, all from this machine's own sources: a Debian base made with debootstrap from the mirror
 * its apt already uses, a Bun base carrying the Bun that runs this script, the service's image from
 * the Dockerfile on that base, and stand-ins for the compose file's PostgreSQL, Redis and proxy
 * images built from Debian's packages (scripts/container/services.Containerfile).
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { alive, build, imageExists, podman } from './podman'

export const REPO = resolve(import.meta.dir, '..', '..')
export const DEBIAN_IMAGE = 'localhost/debian:bookworm-min'
export const BUN_IMAGE = `localhost/bun:${Bun.version}`
export const APP_IMAGE = 'localhost/agent-platform:check'
export const SERVICE_IMAGES = { postgres: 'localhost/agent-platform-postgres:local', redis: 'localhost/agent-platform-redis:local', proxy: 'localhost/agent-platform-proxy:local' }

async function sh(cmd: string[], what: string): Promise<string> {
  const proc = Bun.spawn(cmd, { stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  if (code !== 0) throw new Error(`${what}: ${cmd.join(' ')} exited ${code}\n${err.slice(-3000)}`)
  return out.trim()
}

/** Debian bookworm, minbase, from the machine's apt mirror; apt's caches emptied. */
export async function debianBase(): Promise<void> {
  if (await imageExists(DEBIAN_IMAGE)) return
  const mirror = await sh(['bash', join(REPO, '.ci', 'debian-mirror.sh')], "the machine's Debian mirror")
  const rootfs = mkdtempSync(join(tmpdir(), 'apcheck-rootfs-'))
  try {
    await alive('debootstrap', sh(['debootstrap', '--variant=minbase', 'bookworm', rootfs, mirror], 'debootstrap'))
    rmSync(join(rootfs, 'var', 'cache', 'apt', 'archives'), { recursive: true, force: true })
    mkdirSync(join(rootfs, 'var', 'cache', 'apt', 'archives', 'partial'), { recursive: true })
    for (const f of readdirSync(join(rootfs, 'var', 'lib', 'apt', 'lists'))) if (f !== 'partial' && f !== 'lock') rmSync(join(rootfs, 'var', 'lib', 'apt', 'lists', f), { force: true })
    const tar = Bun.spawn(['tar', '-C', rootfs, '-c', '.'], { stdout: 'pipe' })
    await podman(['import', '-', DEBIAN_IMAGE], { stdin: tar.stdout })
    if ((await tar.exited) !== 0) throw new Error('tar of the Debian root file system failed')
  } finally {
    rmSync(rootfs, { recursive: true, force: true })
  }
}

/**
 * The stand-in for the official Bun image: this Bun's own binary, the user "bun" (uid 1000), and the
 * certificates this machine added to its store (so that `bun install` in the build reaches the npm
 * registry the way the machine does, through whatever proxy it trusts).
 */
export async function bunBase(): Promise<void> {
  if (await imageExists(BUN_IMAGE)) return
  const context = mkdtempSync(join(tmpdir(), 'apcheck-bun-'))
  try {
    copyFileSync(process.execPath, join(context, 'bun'))
    mkdirSync(join(context, 'ca-certificates'))
    const extra = '/usr/local/share/ca-certificates'
    if (existsSync(extra)) for (const f of readdirSync(extra)) if (f.endsWith('.crt')) copyFileSync(join(extra, f), join(context, 'ca-certificates', f))
    await build(['--build-arg', `DEBIAN_IMAGE=${DEBIAN_IMAGE}`, '-f', join(REPO, 'scripts', 'container', 'bun-base.Containerfile'), '-t', BUN_IMAGE, context])
  } finally {
    rmSync(context, { recursive: true, force: true })
  }
}

/** The service's image from the Dockerfile, on the local Bun base; `label` makes a new version of the same code. */
export async function appImage(tag = APP_IMAGE, label?: string): Promise<void> {
  await build(['--build-arg', `BUN_IMAGE=${BUN_IMAGE}`, ...(label ? ['--label', `org.opencontainers.image.version=${label}`] : []), '-t', tag, REPO])
}

/** PostgreSQL with pgvector, Redis and Caddy from Debian's packages: the compose file's three public images. */
export async function serviceImages(): Promise<void> {
  for (const [target, tag] of Object.entries(SERVICE_IMAGES)) {
    if (await imageExists(tag)) continue
    await build(['--target', target, '--build-arg', `DEBIAN_IMAGE=${DEBIAN_IMAGE}`, '-f', join(REPO, 'scripts', 'container', 'services.Containerfile'), '-t', tag, join(REPO, 'scripts', 'container')])
  }
}
