import type { Logger } from 'pino'
import type { Pool } from '../../store/db'
import type { ChargeOutbox } from '../charge-outbox'
import type { AccessCache } from '../access-cache'
import type { Catalog } from './catalog'
import { Gateway } from './gateway'
import { AnthropicProvider } from './providers/anthropic'
import { LocalProvider } from './providers/local'
import { OpenAIProvider } from './providers/openai'
import type { Provider } from './types'

/** The gateway over every provider of the catalogue. */
export function createGateway(d: { sql: Pool; log: Logger; catalog: Catalog; nudgeEvents: () => void; charges: ChargeOutbox; access: AccessCache }): Gateway {
  const providers = new Map<string, Provider>()
  for (const spec of d.catalog.providers.values()) {
    providers.set(spec.id, spec.kind === 'local' ? new LocalProvider() : spec.kind === 'anthropic' ? new AnthropicProvider(spec) : new OpenAIProvider(spec))
  }
  return new Gateway({ ...d, providers })
}
