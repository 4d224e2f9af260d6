/** The TypeBox schemas of the ops routes (src/routes/ops.ts), named in the OpenAPI document where shared, and the mappers from rows to them. */
import { t } from 'elysia'

export const Check = t.Object({ status: t.Union([t.Literal('ok'), t.Literal('down')]), kind: t.String(), error: t.Optional(t.String()) })
