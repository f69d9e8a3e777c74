import { request } from 'node:https';

/**
 * HTTPS requests on a fresh connection each (no keep-alive pool), for the noisy-neighbour bench: the
 * second agent's REST calls (a new client must get in, not only one already connected) and the upload
 * flood (a declared Content-Length, a body streamed in chunks, never held whole by the bench).
 */

/** Where and whom to ask: the master's base URL and the CA that signed its certificate. */
export interface RawTarget {
  url: string;
  caPem: string;
  /**
   * The address to connect from (e.g. 127.0.0.2 for the floods, so a per-peer limit of the master
   * tells them from the neighbours on 127.0.0.1); unset: the system's choice.
   */
  localAddress?: string;
}

/** What came back: the status and body, or why nothing did (`ETIMEDOUT`, `ECONNRESET`, …). */
export type RawOutcome = { status: number; body: string } | { error: string };

/** One JSON request on its own TLS connection; settles (never throws) within `timeoutMs`. */
export function requestJson(
  target: RawTarget,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: unknown,
  timeoutMs: number,
): Promise<RawOutcome> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve) => {
    const req = request(new URL(path, target.url), {
      method,
      ca: target.caPem,
      agent: false,
      ...(target.localAddress ? { localAddress: target.localAddress } : {}),
      headers: {
        ...headers,
        ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
      },
    });
    settleOn(req, timeoutMs, resolve);
    req.end(payload);
  });
}

/**
 * A PUT of `totalBytes` declared in Content-Length, streamed as `chunk` repeated (the last one cut), on
 * its own connection. Writing stops as soon as the server answers; `stop` aborts it (outcome
 * `STOPPED`); settles within `timeoutMs`. Returns the outcome and the bytes written.
 */
export function putStreamed(
  target: RawTarget,
  path: string,
  headers: Record<string, string>,
  chunk: Buffer,
  totalBytes: number,
  stop: AbortSignal,
  timeoutMs: number,
): Promise<{ outcome: RawOutcome; written: number }> {
  let written = 0;
  let answered = false;
  return new Promise((resolve) => {
    const req = request(new URL(path, target.url), {
      method: 'PUT',
      ca: target.caPem,
      agent: false,
      ...(target.localAddress ? { localAddress: target.localAddress } : {}),
      headers: {
        ...headers,
        'content-type': 'application/octet-stream',
        'content-length': String(totalBytes),
      },
    });
    req.on('response', () => {
      answered = true;
    });
    settleOn(req, timeoutMs, (outcome) => {
      stop.removeEventListener('abort', onStop);
      resolve({ outcome, written });
    });
    const onStop = () => req.destroy(new Error('STOPPED'));
    if (stop.aborted) onStop();
    else stop.addEventListener('abort', onStop);
    const pump = (): void => {
      while (written < totalBytes && !answered && !req.destroyed) {
        const n = Math.min(chunk.length, totalBytes - written);
        written += n;
        if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
          req.once('drain', pump);
          return;
        }
      }
      if (written >= totalBytes && !req.writableEnded) req.end();
    };
    pump();
  });
}

/** Resolves once with the response (read whole) or the error; destroys the request at `timeoutMs`. */
function settleOn(
  req: ReturnType<typeof request>,
  timeoutMs: number,
  resolve: (o: RawOutcome) => void,
): void {
  let done = false;
  const finish = (o: RawOutcome) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    resolve(o);
    // An early answer leaves the declared body unsent: drop the connection rather than finish it.
    req.destroy();
  };
  const timer = setTimeout(() => finish({ error: 'TIMEOUT' }), timeoutMs);
  // A server that answers early and then drops the connection (a 413 before the body) may make the
  // request fail while the answer is read: the status it sent still counts.
  let status: number | undefined;
  let text = '';
  req.on('response', (res) => {
    status = res.statusCode ?? 0;
    res.setEncoding('utf8');
    res.on('data', (d: string) => {
      if (text.length < 64 * 1024) text += d;
    });
    res.on('end', () => finish({ status: res.statusCode ?? 0, body: text }));
    res.on('error', (err: NodeJS.ErrnoException) =>
      finish({ status: res.statusCode ?? 0, body: err.message }),
    );
  });
  req.on('error', (err: NodeJS.ErrnoException) =>
    finish(status === undefined ? { error: err.code ?? err.message } : { status, body: text }),
  );
}

/** A short label for an outcome: `200`, `400 INVALID_INPUT`, `ECONNRESET`. */
export function outcomeLabel(o: RawOutcome): string {
  if ('error' in o) return o.error;
  const code = /"code"\s*:\s*"([A-Z_]+)"/.exec(o.body)?.[1];
  return code ? `${o.status} ${code}` : String(o.status);
}
