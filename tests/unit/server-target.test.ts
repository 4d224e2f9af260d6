import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { serverTarget } from '../../src/store/db'

setDefaultTimeout(TEST_TIMEOUT_MS)

// How a DATABASE_URL reaches postgres.js: host and port as written, or a Unix socket's path when
// the URL names its directory the ways libpq reads one (docs/deployment.md, "Server mode").
describe('serverTarget', () => {
  test('host:port: the URL passes unchanged; the description holds no password', () => {
    const url = 'postgres://app:s%3Acret@db.internal:6543/agents?sslmode=require'
    expect(serverTarget(url)).toEqual({ url, path: null, describe: 'postgres db.internal:6543/agents' })
    expect(serverTarget('postgresql://app@127.0.0.1/agents')).toEqual({ url: 'postgresql://app@127.0.0.1/agents', path: null, describe: 'postgres 127.0.0.1:5432/agents' })
  })

  test('a directory in the host parameter: its socket, and the parameter taken out of the query', () => {
    expect(serverTarget('postgres://app:pw@localhost:5433/agents?host=/var/run/postgresql/&sslmode=disable')).toEqual({
      url: 'postgres://app:pw@localhost:5433/agents?sslmode=disable',
      path: '/var/run/postgresql/.s.PGSQL.5433',
      describe: 'postgres /var/run/postgresql/.s.PGSQL.5433/agents',
    })
    // No host at all, with or without a user: valid for libpq.
    expect(serverTarget('postgres://app:pw@/agents?host=/tmp')).toMatchObject({ url: 'postgres://app:pw@localhost/agents', path: '/tmp/.s.PGSQL.5432' })
    expect(serverTarget('postgres:///agents?host=/tmp')).toMatchObject({ path: '/tmp/.s.PGSQL.5432' })
  })

  test('a directory percent-encoded as the host, in either case', () => {
    for (const host of ['%2Fvar%2Frun%2Fpostgresql', '%2fvar%2frun%2fpostgresql']) {
      expect(serverTarget(`postgres://app@${host}/agents`)).toEqual({
        url: 'postgres://app@localhost/agents',
        path: '/var/run/postgresql/.s.PGSQL.5432',
        describe: 'postgres /var/run/postgresql/.s.PGSQL.5432/agents',
      })
    }
  })

  test('a host name in the host parameter replaces the URL\'s host', () => {
    expect(serverTarget('postgres://app@ignored:5433/agents?host=db.internal')).toEqual({ url: 'postgres://app@db.internal:5433/agents', path: null, describe: 'postgres db.internal:5433/agents' })
  })

  test('not a URL: a clear error', () => {
    expect(() => serverTarget('postgres://app@[bad/agents')).toThrow('DATABASE_URL is not a URL')
  })
})
