import { connect, type Socket } from 'node:net';

/**
 * Plain-HTTP/1.1 over a raw TCP socket, for the connection tests (docs/performance.md "Noisy neighbours"): a client that sends
 * headers and then as much (or as little) body as the test wants, and sees exactly when the master
 * answers and when it closes. Only for a master started with `tls: { mode: 'off' }` on loopback.
 */

/** One parsed answer. */
export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** A raw connection and what it received. */
export interface RawConnection {
  socket: Socket;
  /** Resolves when the master closed (or the socket ended) — never rejects. */
  closed: Promise<void>;
  /** Resolves with the first complete answer; rejects when the socket closes without one. */
  response: Promise<RawResponse>;
  /** Whether the socket is closed by now. */
  isClosed(): boolean;
}

/** Opens a connection to `url` (http://host:port), optionally from `localAddress` (e.g. 127.0.0.2). */
export function openRaw(url: string, localAddress?: string): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port), ...(localAddress ? { localAddress } : {}) });
    let buf = Buffer.alloc(0);
    let closedFlag = false;
    let onResponse: (r: RawResponse) => void = () => undefined;
    let onNoResponse: (e: Error) => void = () => undefined;
    const response = new Promise<RawResponse>((res, rej) => {
      onResponse = res;
      onNoResponse = rej;
    });
    response.catch(() => undefined);
    const closed = new Promise<void>((res) => {
      socket.on('close', () => {
        closedFlag = true;
        onNoResponse(new Error('closed without a complete answer'));
        res();
      });
    });
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const parsed = parse(buf);
      if (parsed) onResponse(parsed);
    });
    socket.once('connect', () =>
      resolve({ socket, closed, response, isClosed: () => closedFlag || socket.destroyed }),
    );
    socket.once('error', reject);
  });
}

function parse(buf: Buffer): RawResponse | null {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0]?.split(' ')[1]);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  if (buf.length < end + 4 + length) return null;
  return { status, headers, body: buf.subarray(end + 4, end + 4 + length).toString('utf8') };
}

/** The request line and headers of one request (`Host` added). */
export function requestHead(method: string, path: string, headers: Record<string, string | number>): string {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** The `error.code` of a JSON error answer. */
export function errorCode(r: RawResponse): string | undefined {
  try {
    return (JSON.parse(r.body) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}
