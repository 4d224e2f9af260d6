import { parse } from 'csv-parse/sync'
import { type Block, decodeText, ParseError } from './types'

/**
 * A comma-separated file (RFC 4180 quoting: embedded commas, quotes and line breaks) as one 'rows'
 * block: the first record is the header, the others the rows.
 *
 * Rows stay CSV lines rather than `column: value` pairs. The chunker repeats the header line at the
 * top of every chunk, so each chunk is a small self-contained CSV table, which language models read
 * as such; a CSV line costs about half the tokens of its `column: value` form (twice the rows per
 * chunk, half the embedding calls), and the vector of a chunk is about its values (what queries name:
 * "customers in Lisbon") instead of the column names repeated on every row.
 *
 * One row per line is what the chunker relies on, so line breaks inside a field become spaces.
 * Ragged rows and stray quotes inside unquoted fields are accepted (spreadsheets export both); an
 * unterminated quoted field is a parse_error. Only commas delimit: a semicolon- or tab-separated file
 * comes out as one column, still readable text.
 */
export function parseCsv(bytes: Uint8Array): Block[] {
  let records: string[][]
  try {
    records = parse(decodeText(bytes), { relax_column_count: true, relax_quotes: true, skip_empty_lines: true, bom: true }) as string[][]
  } catch (err) {
    if (err instanceof ParseError) throw err
    throw new ParseError('parse_error', `the CSV file could not be parsed: ${(err as Error).message}`)
  }
  const lines = records.filter((r) => r.some((field) => field.trim() !== '')).map(toLine)
  const [header, ...rows] = lines
  if (header === undefined || rows.length === 0) throw new ParseError('empty_document', 'the CSV file has no data rows')
  return [{ kind: 'rows', text: rows.join('\n'), header }]
}

/** A record as one CSV line: fields quoted only when they need it. */
function toLine(record: readonly string[]): string {
  return record.map(field).join(',')
}

function field(value: string): string {
  const v = value.includes('\n') ? value.split('\n').map((s) => s.trim()).filter((s) => s !== '').join(' ') : value.trim()
  return /[",]/.test(v) ? `"${v.replaceAll('"', '""')}"` : v
}
