/**
 * pgvector's text form of a vector (`[0.25,-1.5e-3,...]`), as short as its stored values allow.
 * pgvector keeps float4: each value is written with the 9 significant digits that name its float4
 * exactly (the nearest float4 of the text is the value's own float4, the one `Array.join` would
 * have led to), instead of a double's up to 17. A 384-dimension local-embed vector: ~4.3 kB of text
 * instead of ~6.1 kB, which is what an insert sends, what PostgreSQL parses, and (for ingestion)
 * what crosses from the document process; building it costs about what `join` does.
 */
const POW10 = Array.from({ length: 64 }, (_, i) => 10 ** i)

let buffer = new Uint8Array(1 << 14)
const latin1 = new TextDecoder('latin1')

/** The text pgvector reads back as exactly the float4 values of `values` (NaN and infinities as `join` writes them: refused there). */
export function vectorText(values: ArrayLike<number>): string {
  // Per value at most 15 bytes: a sign, 9 digits, "e-", up to 3 exponent digits.
  if (buffer.length < values.length * 16 + 2) buffer = new Uint8Array(values.length * 16 + 2)
  const out = buffer
  let o = 0
  out[o++] = 91 // [
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out[o++] = 44 // ,
    const f = Math.fround(values[i]!)
    if (f === 0) {
      out[o++] = 48
      continue
    }
    if (!Number.isFinite(f)) {
      for (const c of String(f)) out[o++] = c.charCodeAt(0)
      continue
    }
    let a = f
    if (f < 0) {
      out[o++] = 45 // -
      a = -f
    }
    // a = m · 10^k with m of 9 digits: |text - a| ≤ a · 5e-9, well inside the half gap (≥ 3e-8 · a)
    // between float4 neighbours, so the text reads back as this float4.
    let e = Math.floor(Math.log10(a))
    let m = scaled(a, 8 - e)
    if (m >= 1e9) m = scaled(a, 8 - ++e)
    else if (m < 1e8) m = scaled(a, 8 - --e)
    let k = e - 8
    while (m % 10 === 0) {
      m /= 10
      k++
    }
    let d = 1
    while (d * 10 <= m) d *= 10
    for (; d >= 1; d /= 10) {
      const q = Math.floor(m / d)
      out[o++] = 48 + q
      m -= q * d
    }
    if (k !== 0) {
      out[o++] = 101 // e
      if (k < 0) {
        out[o++] = 45
        k = -k
      }
      if (k >= 100) out[o++] = 48 + Math.floor(k / 100)
      if (k >= 10) out[o++] = 48 + (Math.floor(k / 10) % 10)
      out[o++] = 48 + (k % 10)
    }
  }
  out[o++] = 93 // ]
  return latin1.decode(out.subarray(0, o))
}

/** round(a · 10^p), a power at a time that stays exact (10^p is exact up to 10^22). */
function scaled(a: number, p: number): number {
  if (p >= 0) return p <= 22 ? Math.round(a * POW10[p]!) : Math.round(a * POW10[22]! * POW10[p - 22]!)
  return -p <= 22 ? Math.round(a / POW10[-p]!) : Math.round(a / POW10[22]! / POW10[-p - 22]!)
}
