import { describe, expect, it } from 'vitest';
import { bodyVerdict, peerKey } from '../../../src/http/connection-limits.js';

/** The body watchdog's decision (docs/performance.md "Noisy neighbours"); the cut itself is tested on a real master. */

const limits = {
  body_timeout_ms: 1000,
  min_body_bytes_per_second: 1000,
  max_connections_per_peer: 10,
  max_connections_per_principal: 64,
  max_connections: 0,
};

describe('bodyVerdict', () => {
  it('cuts a body that idles for body_timeout_ms, however fast it was before', () => {
    expect(bodyVerdict({ elapsed_ms: 5000, idle_ms: 1000, received: 1e9 }, limits)).toBe('idle');
    expect(bodyVerdict({ elapsed_ms: 5000, idle_ms: 999, received: 1e9 }, limits)).toBeNull();
  });

  it('gives every body body_timeout_ms before the minimum rate applies, then averages', () => {
    expect(bodyVerdict({ elapsed_ms: 1000, idle_ms: 0, received: 0 }, limits)).toBeNull();
    // 2 s in: at least 1 s × 1000 B/s.
    expect(bodyVerdict({ elapsed_ms: 2000, idle_ms: 0, received: 999 }, limits)).toBe('slow');
    expect(bodyVerdict({ elapsed_ms: 2000, idle_ms: 0, received: 1000 }, limits)).toBeNull();
  });

  it('a minimum rate of 0 leaves only the idle cut', () => {
    const noRate = { ...limits, min_body_bytes_per_second: 0 };
    expect(bodyVerdict({ elapsed_ms: 1e7, idle_ms: 10, received: 0 }, noRate)).toBeNull();
  });
});

describe('peerKey: what the per-peer cap counts as one peer', () => {
  it('an IPv4 address, also IPv4-mapped, is itself', () => {
    expect(peerKey('203.0.113.7')).toBe('203.0.113.7');
    expect(peerKey('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(peerKey(undefined)).toBe('unknown');
  });

  it('every IPv6 address of one /64 is one peer, however it is written', () => {
    const one = peerKey('2001:db8:1:2::1');
    expect(one).toBe('2001:db8:1:2::/64');
    for (const a of [
      '2001:db8:1:2:ffff:ffff:ffff:ffff',
      '2001:0DB8:0001:0002:0:0:0:9',
      '2001:db8:1:2::abcd%eth0',
    ])
      expect(peerKey(a)).toBe(one);
    expect(peerKey('2001:db8:1:3::1')).not.toBe(one);
    expect(peerKey('::1')).toBe('0:0:0:0::/64');
    expect(peerKey('fe80::1')).toBe('fe80:0:0:0::/64');
  });
});
