/**
 * The closed set of error codes of the error body `{ request_id, error: { code, message, param?, details? } }`,
 * and the one place that maps them to HTTP statuses.
 */
export const errorStatus = {
  invalid_json: 400,
  validation_error: 400,
  invalid_cursor: 400,
  invalid_sort: 400,
  invalid_filter: 400,
  unauthenticated: 401,
  budget_exceeded: 402,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  run_not_running: 409,
  run_not_waiting: 409,
  idempotency_key_in_use: 409,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  idempotency_key_reused: 422,
  rate_limited: 429,
  internal_error: 500,
  upstream_error: 502,
  unavailable: 503,
  upstream_timeout: 504,
} as const

export type ErrorCode = keyof typeof errorStatus

export interface ErrorDetail {
  path: string
  message: string
}

export class AppError extends Error {
  readonly status: number
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly extra: { param?: string; details?: ErrorDetail[]; headers?: Record<string, string> } = {},
  ) {
    super(message)
    this.name = 'AppError'
    this.status = errorStatus[code]
  }
}

export const notFound = (what: string, id: string) => new AppError('not_found', `${what} ${id} not found`)

export const invalid = (param: string, message: string) =>
  new AppError('validation_error', `${param}: ${message}`, { param, details: [{ path: param, message }] })

export interface ErrorBody {
  request_id: string
  error: { code: ErrorCode; message: string; param?: string; details?: ErrorDetail[] }
}

export function errorBody(requestId: string, err: AppError): ErrorBody {
  const error: ErrorBody['error'] = { code: err.code, message: err.message }
  if (err.extra.param !== undefined) error.param = err.extra.param
  if (err.extra.details !== undefined) error.details = err.extra.details
  return { request_id: requestId, error }
}
