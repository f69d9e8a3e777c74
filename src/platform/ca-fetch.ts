import { setMaxListeners } from 'node:events';
import { Agent, fetch as undiciFetch } from 'undici';

/*
 * Trusting a private CA from a client, apart from tls.ts (which makes certificates with @peculiar/x509)
 * so the bundled stdio bridge carries only this: 1.4 MiB instead of 2 MiB.
 */

/**
 * An undici Agent whose TLS connections trust only `caPem` (one or more PEM certificates; Node's `ca`
 * option replaces the public roots). In-process clients of a master use it instead of
 * NODE_EXTRA_CA_CERTS, which Node reads only at process start. Close it when done so keep-alive
 * sockets do not hold the process open.
 */
export function createCaAgent(caPem: string): Agent {
  return new Agent({ connect: { ca: caPem } });
}

/** A fetch that trusts a private CA, and the means to release its sockets. */
export interface CaTrustingFetch {
  /** Drop-in for the global fetch (e.g. the MCP client transport's `fetch` option). */
  fetch: typeof globalThis.fetch;
  /** Closes the underlying Agent's connections. */
  close: () => Promise<void>;
}

/**
 * A fetch function whose TLS connections trust `caPem`. It pairs undici's own `fetch` with an Agent
 * from the same undici version, because handing an npm-undici Agent to Node's bundled fetch relies on
 * the two versions' dispatcher interfaces staying compatible across Node releases.
 */
export function createCaTrustingFetch(caPem: string): CaTrustingFetch {
  const agent = createCaAgent(caPem);
  // The casts bridge npm undici's Request/Response types and the DOM-style ones in @types/node; at
  // runtime both are WHATWG fetch objects, which is all the MCP SDK relies on.
  const trustingFetch = ((input: Parameters<typeof globalThis.fetch>[0], init?: RequestInit) =>
    undiciFetch(
      input as never,
      { ...(init as object), dispatcher: agent } as never,
    )) as unknown as typeof globalThis.fetch;
  return { fetch: withSessionSignals(trustingFetch), close: () => agent.close() };
}

/**
 * `base`, except that a signal passed with many requests may hold any number of listeners. The MCP SDK's
 * client transport passes one AbortSignal (its session's) to every request; undici's fetch adds an
 * `abort` listener to it per request and removes it only when that request is garbage-collected, and
 * warns (MaxListenersExceededWarning, on stderr) once 1,500 are waiting: after ~1,500 tool calls of a
 * long-lived stdio bridge, or of any client. The listeners are freed with their requests, so the warning
 * says nothing; lifting the limit on such a signal keeps it off a user's MCP log.
 */
export function withSessionSignals(base: typeof globalThis.fetch): typeof globalThis.fetch {
  const lifted = new WeakSet<AbortSignal>();
  return (input, init) => {
    const signal = init?.signal;
    if (signal && !lifted.has(signal)) {
      lifted.add(signal);
      setMaxListeners(0, signal);
    }
    return base(input, init);
  };
}
