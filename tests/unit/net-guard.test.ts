import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TEST_TIMEOUT_MS } from '../helpers/timeouts'
import { UnsafeUrlError, checkUrlShape, isPublicAddress, resolveAllowed, type UrlPolicy } from '../../src/lib/net-guard'

setDefaultTimeout(TEST_TIMEOUT_MS)

/** The SSRF guard of docs/webhooks.md. Only loopback names and IP literals are resolved: no network. */
const STRICT: UrlPolicy = { allowHttp: false, allowPrivate: false }
const HTTP: UrlPolicy = { allowHttp: true, allowPrivate: false }
const LOCAL: UrlPolicy = { allowHttp: true, allowPrivate: true }

/** The UnsafeUrlError a call throws (sync or async). */
async function refusal(fn: () => unknown): Promise<UnsafeUrlError> {
  try {
    await fn()
  } catch (err) {
    if (err instanceof UnsafeUrlError) return err
    throw err
  }
  throw new Error('expected an UnsafeUrlError, nothing was thrown')
}

describe('isPublicAddress', () => {
  test.each([
    // IPv4
    ['127.0.0.1', false, 'loopback'],
    ['127.255.255.254', false, 'loopback /8'],
    ['10.0.0.1', false, '10/8'],
    ['10.255.255.255', false, '10/8 top'],
    ['172.15.255.255', true, 'just below 172.16/12'],
    ['172.16.0.0', false, '172.16/12 bottom'],
    ['172.31.255.255', false, '172.16/12 top'],
    ['172.32.0.0', true, 'just above 172.16/12'],
    ['192.168.0.1', false, '192.168/16'],
    ['192.168.255.255', false, '192.168/16 top'],
    ['169.254.169.254', false, 'link-local (cloud metadata)'],
    ['100.64.0.1', false, 'CGNAT 100.64/10'],
    ['100.127.255.255', false, 'CGNAT top'],
    ['100.63.255.255', true, 'just below CGNAT'],
    ['100.128.0.0', true, 'just above CGNAT'],
    ['0.0.0.0', false, 'unspecified'],
    ['255.255.255.255', false, 'broadcast'],
    ['224.0.0.1', false, 'multicast 224/4'],
    ['239.255.255.255', false, 'multicast top'],
    ['192.0.2.1', false, 'TEST-NET-1 documentation'],
    ['8.8.8.8', true, 'public'],
    ['1.1.1.1', true, 'public'],
    // IPv6
    ['::1', false, 'loopback'],
    ['::', false, 'unspecified'],
    ['fc00::1', false, 'unique local fc00::/7'],
    ['fdff:ffff::1', false, 'unique local fd'],
    ['fe80::1', false, 'link-local fe80::/10'],
    ['febf::1', false, 'link-local top'],
    ['ff00::1', false, 'multicast ff00::/8'],
    ['ff02::1', false, 'multicast all-nodes'],
    ['::ffff:10.0.0.1', false, 'IPv4-mapped private'],
    ['::ffff:127.0.0.1', false, 'IPv4-mapped loopback'],
    ['::ffff:8.8.8.8', true, 'IPv4-mapped public'],
    ['64:ff9b::a00:1', false, 'NAT64 64:ff9b::/96'],
    ['2001:db8::1', false, 'documentation 2001:db8::/32'],
    ['2606:4700:4700::1111', true, 'public'],
    ['2001:4860:4860::8888', true, 'public'],
    // IPv6 forms that stand for an IPv4 address are judged as it
    ['::7f00:1', false, 'IPv4-compatible loopback (::127.0.0.1)'],
    ['::127.0.0.1', false, 'IPv4-compatible loopback, dotted'],
    ['::a9fe:a9fe', false, 'IPv4-compatible link-local (cloud metadata)'],
    ['::169.254.169.254', false, 'IPv4-compatible link-local, dotted'],
    ['::a00:1', false, 'IPv4-compatible 10/8'],
    ['::c0a8:101', false, 'IPv4-compatible 192.168/16'],
    ['::6440:1', false, 'IPv4-compatible CGNAT'],
    ['::808:808', true, 'IPv4-compatible public'],
    ['0:0:0:0:0:0:7f00:1', false, 'IPv4-compatible loopback, written out'],
    ['::ffff:7f00:1', false, 'IPv4-mapped loopback, hex'],
    ['::ffff:a9fe:a9fe', false, 'IPv4-mapped link-local, hex'],
    ['::ffff:0:7f00:1', false, 'SIIT ::ffff:0:0:0/96 loopback'],
    ['::ffff:0:a9fe:a9fe', false, 'SIIT link-local'],
    ['::ffff:0:808:808', true, 'SIIT public'],
    ['64:ff9b::7f00:1', false, 'NAT64 loopback'],
    ['64:ff9b::169.254.169.254', false, 'NAT64 link-local, dotted'],
    ['64:ff9b::c0a8:1', false, 'NAT64 192.168/16'],
    ['64:ff9b::808:808', true, 'NAT64 of a public address'],
    ['64:ff9b:1::a9fe:a9fe', false, 'NAT64 local-use 64:ff9b:1::/48'],
    ['64:ff9b:1:808:800::', false, 'NAT64 local-use, whatever it carries'],
    ['2002:7f00:1::1', false, '6to4 of loopback'],
    ['2002:a9fe:a9fe::1', false, '6to4 of link-local'],
    ['2002:a00:1::', false, '6to4 of 10/8'],
    ['2002:808:808::1', false, '6to4 of a public address (through a relay: not public)'],
    ['2001:0:4136:e378:8000:63bf:80ff:fffe', false, 'Teredo, client 127.0.0.1 inverted'],
    ['2001:0:a9fe:a9fe::1', false, 'Teredo, server link-local'],
    ['2001:0:808:808:0:0:f7f7:f7f7', false, 'Teredo of public addresses (not public)'],
    ['2606:4700::5efe:7f00:1', false, 'ISATAP identifier carrying loopback'],
    ['2606:4700::200:5efe:a9fe:a9fe', false, 'ISATAP identifier (u bit) carrying link-local'],
    ['2606:4700::5efe:a00:1', false, 'ISATAP identifier carrying 10/8'],
    ['2606:4700::5efe:808:808', true, 'ISATAP identifier carrying a public address, public prefix'],
    ['fe80::5efe:808:808', false, 'ISATAP link-local prefix'],
    ['::2', false, 'IPv4-compatible 0.0.0.2'],
    // not addresses
    ['localhost', false, 'a name'],
    ['[::1]', false, 'brackets'],
    ['', false, 'empty'],
    ['999.1.1.1', false, 'out of range'],
  ] as const)('%s → %p (%s)', (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected)
  })
})

describe('checkUrlShape', () => {
  test.each([
    ['https://example.com/hook', STRICT, 'example.com'],
    ['https://example.com:8443/a?b=c', STRICT, 'example.com'],
    ['https://[2606:4700:4700::1111]/x', STRICT, '[2606:4700:4700::1111]'],
    ['http://example.com/hook', HTTP, 'example.com'],
    ['https://example.com/hook', HTTP, 'example.com'],
    // The shape says nothing about the address: that is resolveAllowed's job.
    ['https://127.0.0.1/', STRICT, '127.0.0.1'],
  ] as const)('accepts %s with %j', (raw, policy, hostname) => {
    const url = checkUrlShape(raw, policy)
    expect(url).toBeInstanceOf(URL)
    expect(url.hostname).toBe(hostname)
  })

  test.each([
    ['http://example.com/hook', STRICT, 'must use https://'],
    ['ftp://example.com/', STRICT, 'must use https://'],
    ['ftp://example.com/', HTTP, 'must use https:// or http://'],
    ['file:///etc/passwd', HTTP, 'must use https:// or http://'],
    ['javascript:alert(1)', HTTP, 'must use https:// or http://'],
    ['ws://example.com/', HTTP, 'must use https:// or http://'],
    ['https://user:pw@example.com/', STRICT, 'credentials'],
    ['https://user@example.com/', STRICT, 'credentials'],
    ['https://:pw@example.com/', STRICT, 'credentials'],
    ['http://user:pw@example.com/', HTTP, 'credentials'],
    ['not a url', STRICT, 'not a valid absolute URL'],
    ['', STRICT, 'not a valid absolute URL'],
    ['/relative/path', STRICT, 'not a valid absolute URL'],
    ['https://', STRICT, 'not a valid absolute URL'],
    ['https://exa mple.com/', STRICT, 'not a valid absolute URL'],
    ['https://[::1/', STRICT, 'not a valid absolute URL'],
  ] as const)('refuses %p with %j: %s', async (raw, policy, message) => {
    const err = await refusal(() => checkUrlShape(raw, policy))
    expect(err.name).toBe('UnsafeUrlError')
    expect(err.message).toContain(message)
  })
})

describe('resolveAllowed', () => {
  test('localhost is refused without allowPrivate, naming the address and the switch', async () => {
    const err = await refusal(() => resolveAllowed(new URL('http://localhost:8080/hook'), HTTP))
    expect(err.message).toContain('host localhost resolves to')
    expect(err.message).toContain('WEBHOOK_ALLOW_PRIVATE_NETWORKS=true')
  })

  test('localhost is allowed with allowPrivate: a loopback address, family 4 or 6', async () => {
    const pinned = await resolveAllowed(new URL('http://localhost:8080/hook'), LOCAL)
    expect([4, 6]).toContain(pinned.family)
    expect(['127.0.0.1', '::1']).toContain(pinned.address)
    expect(pinned.family).toBe(pinned.address.includes(':') ? 6 : 4)
  })

  test.each([
    ['https://127.0.0.1/', '127.0.0.1'],
    ['https://10.1.2.3/', '10.1.2.3'],
    ['https://169.254.169.254/latest/meta-data/', '169.254.169.254'],
    ['https://[::1]:8443/', '::1'],
    ['https://[fe80::1]/', 'fe80::1'],
    ['https://[::ffff:10.0.0.1]/', '::ffff:a00:1'],
    ['https://0.0.0.0/', '0.0.0.0'],
    ['https://[::127.0.0.1]/', '::7f00:1'],
    ['https://[::a9fe:a9fe]/latest/meta-data/', '::a9fe:a9fe'],
    ['https://[::169.254.169.254]/', '::a9fe:a9fe'],
    ['https://[::ffff:0:127.0.0.1]/', '::ffff:0:7f00:1'],
    ['https://[64:ff9b::127.0.0.1]/', '64:ff9b::7f00:1'],
    ['https://[64:ff9b:1::10.0.0.1]/', '64:ff9b:1::a00:1'],
    ['https://[2002:7f00:1::1]/', '2002:7f00:1::1'],
    ['https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/', '2001:0:4136:e378:8000:63bf:80ff:fffe'],
    ['https://[2606:4700::5efe:127.0.0.1]/', '2606:4700::5efe:7f00:1'],
  ])('the literal %s is refused without allowPrivate', async (raw, address) => {
    const err = await refusal(() => resolveAllowed(new URL(raw), STRICT))
    expect(err.message).toContain(`resolves to ${address},`)
  })

  test.each([
    ['https://8.8.8.8/', STRICT, '8.8.8.8', 4],
    ['https://[2606:4700:4700::1111]/', STRICT, '2606:4700:4700::1111', 6],
    ['http://127.0.0.1:9/', LOCAL, '127.0.0.1', 4],
    ['https://[::1]:8443/hook', LOCAL, '::1', 6],
  ] as const)('the literal %s with %j pins %s (family %i) without any lookup', async (raw, policy, address, family) => {
    expect(await resolveAllowed(new URL(raw), policy)).toEqual({ address, family })
  })

  test('a name that does not resolve is an UnsafeUrlError saying so', async () => {
    const err = await refusal(() => resolveAllowed(new URL('https://x.invalid/hook'), STRICT))
    expect(err.message).toContain('host x.invalid does not resolve')
  })

  test('allowPrivate does not make an unresolvable name acceptable', async () => {
    const err = await refusal(() => resolveAllowed(new URL('http://x.invalid/hook'), LOCAL))
    expect(err.message).toContain('does not resolve')
  })
})
