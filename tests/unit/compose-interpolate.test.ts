import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { interpolate, loadCompose } from '../../scripts/container/compose'

setDefaultTimeout(TEST_TIMEOUT_MS)

/**
 * The container check reads docker-compose.yml as compose does (docs/deployment.md, "The container
 * check"): variables interpolated by the compose file format's rules, so that the topology it brings
 * up is the one `docker compose up` would.
 */
describe('interpolation, as the compose file format defines it', () => {
  const env = { SET: 'value', EMPTY: '' }
  test.each([
    ['${SET}', 'value'],
    ['$${SET}', '${SET}'],
    ['${UNSET}', ''],
    ['${SET:-fallback}', 'value'],
    ['${EMPTY:-fallback}', 'fallback'],
    ['${UNSET:-fallback}', 'fallback'],
    ['${EMPTY-fallback}', ''],
    ['${UNSET-fallback}', 'fallback'],
    ['${UNSET:-}', ''],
    ['a ${SET} and ${UNSET:-b}', 'a value and b'],
  ])('%p gives %p', (text, expected) => {
    expect(interpolate(text, env)).toBe(expected)
  })
  test('${VAR:?message} stops with the message when VAR is unset or empty, and gives VAR otherwise', () => {
    expect(() => interpolate('${UNSET:?set it}', env)).toThrow('UNSET set it')
    expect(() => interpolate('${EMPTY:?set it}', env)).toThrow('EMPTY set it')
    expect(interpolate('${SET:?set it}', env)).toBe('value')
  })
})

describe('docker-compose.yml as the check reads it', () => {
  test('every image comes from its variable, defaulting to the public one; SECRET_KEY is required', () => {
    const file = loadCompose({ SECRET_KEY: 'x'.repeat(40) })
    expect(Object.fromEntries(Object.entries(file.services).map(([k, s]) => [k, s.image]))).toEqual({
      postgres: 'pgvector/pgvector:pg16',
      redis: 'redis:7-alpine',
      api: 'agent-platform:latest',
      worker: 'agent-platform:latest',
      proxy: 'caddy:2-alpine',
    })
    expect(loadCompose({ SECRET_KEY: 'x'.repeat(40), POSTGRES_IMAGE: 'localhost/pg:local' }).services.postgres!.image).toBe('localhost/pg:local')
    expect(() => loadCompose({})).toThrow(/SECRET_KEY/)
  })
  test('API and worker containers share one environment and drain within their grace period', () => {
    const file = loadCompose({ SECRET_KEY: 'k'.repeat(40), BOOTSTRAP_API_KEY: 'ap_x' })
    const { api, worker } = file.services
    expect(api!.environment).toEqual(worker!.environment)
    expect(api!.environment).toMatchObject({ SECRET_KEY: 'k'.repeat(40), BOOTSTRAP_API_KEY: 'ap_x', DATABASE_URL: expect.stringMatching(/^postgres:\/\//), REDIS_URL: expect.stringMatching(/^redis:\/\//) })
    expect([api!.stop_grace_period, worker!.stop_grace_period]).toEqual(['30s', '30s'])
    expect([api!.deploy?.replicas, worker!.deploy?.replicas]).toEqual([2, 2])
    expect(worker!.healthcheck?.disable).toBe(true)
  })
})
