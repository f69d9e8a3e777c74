import { hostname } from 'node:os';

/**
 * MCP `Origin` validation (DNS-rebinding defence, MCP transport spec): a browser page from another site
 * must not drive a master. Requests without an Origin (CLIs, agents) pass. A browser Origin passes when
 * it is listed in `allowed_origins`, or when it is the master's own origin: it equals the Host the
 * request was sent to AND that Host names this master (loopback, the listen address, the TLS SANs, the
 * machine's host name). Matching Host alone is not enough: under DNS rebinding a hostile name resolves
 * to the master's address, and the browser then sends Origin and Host both carrying that name.
 */
export function isAllowedOrigin(
  origin: string | undefined,
  host: string | undefined,
  allowed: readonly string[],
  ownNames: ReadonlySet<string>,
): boolean {
  if (origin === undefined) return true;
  if (allowed.includes(origin)) return true;
  try {
    const u = new URL(origin);
    return (
      host !== undefined && u.host === host && ownNames.has(u.hostname.replace(/^\[|\]$/g, '').toLowerCase())
    );
  } catch {
    return false;
  }
}

/** The host names a master answers to, for {@link isAllowedOrigin}. */
export function ownHostNames(listenHost: string, sans: readonly string[]): Set<string> {
  return new Set(
    ['localhost', '127.0.0.1', '::1', listenHost, hostname(), ...sans]
      .map((n) => n.toLowerCase())
      .filter((n) => n !== '0.0.0.0' && n !== '::'),
  );
}
