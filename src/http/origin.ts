/**
 * MCP `Origin` validation (DNS-rebinding defence, MCP transport spec): a browser page from another site
 * must not drive a local master. Requests without an Origin (CLIs, agents) pass; a browser Origin must
 * match the Host it was sent to or be listed in `allowed_origins`.
 */
export function isAllowedOrigin(
  origin: string | undefined,
  host: string | undefined,
  allowed: readonly string[],
): boolean {
  if (origin === undefined) return true;
  if (allowed.includes(origin)) return true;
  try {
    const u = new URL(origin);
    return host !== undefined && u.host === host;
  } catch {
    return false;
  }
}
