import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import S3rver from 's3rver'

/**
 * A real S3-compatible server (s3rver, on loopback) with one bucket, seen through a recording proxy:
 * the proxy counts the multipart uploads begun and how each ended, since s3rver itself does not
 * implement AbortMultipartUpload (it answers 405) and so cannot show whether a client aborted.
 */
export interface S3Server {
  /** The proxy's address: what clients are given as their endpoint. */
  endpoint: string
  /** s3rver's own address, without the proxy: refused once the server is stopped. */
  directEndpoint: string
  bucket: string
  accessKeyId: string
  secretAccessKey: string
  /** Multipart uploads begun and neither completed nor aborted (by upload id). */
  openUploads(): string[]
  /** Parts uploaded so far, over all multipart uploads. */
  partsUploaded(): number
  /** Stops s3rver: its port refuses connections (and the proxy answers 500). */
  stopServer(): Promise<void>
  close(): Promise<void>
}

export async function startS3(bucket = 'originals'): Promise<S3Server> {
  const directory = mkdtempSync(join(tmpdir(), 'ap-s3rver-'))
  let server: S3rver | null = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory, configureBuckets: [{ name: bucket }] })
  const { port } = await server.run()
  const begun = new Set<string>()
  const ended = new Set<string>()
  let parts = 0
  const proxy = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const uploadId = url.searchParams.get('uploadId')
      const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer()
      const res = await fetch(`http://127.0.0.1:${port}${url.pathname}${url.search}`, { method: req.method, headers: req.headers, body })
      const text = await res.arrayBuffer()
      if (req.method === 'POST' && url.searchParams.has('uploads') && res.ok) {
        const id = /<UploadId>([^<]+)<\/UploadId>/.exec(new TextDecoder().decode(text))?.[1]
        if (id) begun.add(id)
      }
      if (uploadId && req.method === 'PUT' && res.ok) parts++
      if (uploadId && req.method === 'POST' && res.ok) ended.add(uploadId)
      // The abort a client sends (s3rver answers 405; S3, MinIO, R2 remove the parts).
      if (uploadId && req.method === 'DELETE') ended.add(uploadId)
      return new Response(text, { status: res.status, headers: res.headers })
    },
  })
  return {
    endpoint: `http://127.0.0.1:${proxy.port}`,
    directEndpoint: `http://127.0.0.1:${port}`,
    bucket,
    accessKeyId: 'S3RVER',
    secretAccessKey: 'S3RVER',
    openUploads: () => [...begun].filter((id) => !ended.has(id)),
    partsUploaded: () => parts,
    async stopServer() {
      const s = server
      server = null
      await s?.close()
    },
    async close() {
      proxy.stop(true)
      await server?.close()
      server = null
      rmSync(directory, { recursive: true, force: true })
    },
  }
}
