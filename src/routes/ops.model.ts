/** The TypeBox schemas of the ops routes (src/routes/ops.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'

export const Check = t.Object({ status: t.Union([t.Literal('ok'), t.Literal('down')]), kind: t.String(), error: t.Optional(t.String()) })

export const Liveness = t.Object({ request_id: t.String(), status: t.Literal('ok') })

/** Readiness: answered with 200 when both checks are ok, else 503 with the same shape. */
export const Readiness = t.Object({ request_id: t.String(), status: t.Union([t.Literal('ok'), t.Literal('unavailable')]), checks: t.Object({ database: Check, redis: Check }) })
