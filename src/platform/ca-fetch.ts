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
 * `base`, except that a signal passed with many requests never collects a listener per request. The MCP
 * SDK's client transport passes its session's one AbortSignal to every request; undici's fetch adds an
 * `abort` listener to it per request that only garbage collection removes, and warns
 * (MaxListenersExceededWarning, on stderr) once 1,500 are waiting: after ~1,500 tool calls of a
 * long-lived stdio bridge. (Raising the signal's limit does not hold: undici sets it back to 1,500 once
 * it sees 10 listeners; `AbortSignal.any` retains every dependent signal on Node 20.) So each request
 * gets its own controller, aborted when the shared signal aborts, and linked to it only until its
 * response body has been read to the end, failed or been cancelled.
 */
export function withSessionSignals(base: typeof globalThis.fetch): typeof globalThis.fetch {
  const lifted = new WeakSet<AbortSignal>();
  return async (input, init) => {
    const shared = init?.signal;
    if (!shared || shared.aborted) return base(input, init);
    // Our own links: one per request in flight (an SSE stream and a few calls), so no warning at 10.
    if (!lifted.has(shared)) {
      lifted.add(shared);
      setMaxListeners(0, shared);
    }
    const own = new AbortController();
    const onAbort = () => own.abort(shared.reason);
    shared.addEventListener('abort', onAbort, { once: true });
    const unlink = () => shared.removeEventListener('abort', onAbort);
    let res: Response;
    try {
      res = await base(input, { ...init, signal: own.signal });
    } catch (err) {
      unlink();
      throw err;
    }
    if (res.body === null) {
      unlink();
      return res;
    }
    const reader = res.body.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            unlink();
            controller.close();
          } else controller.enqueue(value);
        } catch (err) {
          unlink();
          controller.error(err);
        }
      },
      cancel(reason) {
        unlink();
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}
