import { createServer, type Server, Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a master, so a test can break a worker's link the way a network
 * does: `cut` resets every connection and refuses new ones; `hold` keeps the connections open but stops
 * forwarding (a black hole: whatever either side sends waits in socket buffers); `holdFromClient` does
 * that one way only. It forwards bytes only, so TLS runs end to end between the worker and the master.
 */
export interface TcpProxy {
  /** The proxy's port. */
  port: number;
  /** `https://127.0.0.1:PORT` (or http, as the target's scheme). */
  url: string;
  /** Resets every open connection and refuses new ones until `restore`. */
  cut(): void;
  /** Stops forwarding on the open connections, without closing them; new ones are refused. */
  hold(): void;
  /**
   * Like `hold`, one way only: what the client (the worker) sends waits in the socket buffers, what the
   * server (the master) sends still arrives. A report lost on the way while the master's messages go
   * through; new connections are refused.
   */
  holdFromClient(): void;
  /** Accepts and forwards new connections again (held ones stay held: `cut` them first). */
  restore(): void;
  /** How many connections were accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream: Socket;
}

/** Starts a proxy forwarding to `targetUrl`'s host and port. */
export async function startTcpProxy(targetUrl: string): Promise<TcpProxy> {
  const target = new URL(targetUrl);
  const targetPort = Number(target.port);
  const pairs = new Set<Pair>();
  let up = true;
  let accepted = 0;
  const server: Server = createServer((client) => {
    if (!up) {
      client.resetAndDestroy();
      return;
    }
    accepted++;
    const upstream = new Socket();
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    upstream.connect(targetPort, target.hostname, () => {
      client.pipe(upstream);
      upstream.pipe(client);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    port,
    url: `${target.protocol}//127.0.0.1:${port}`,
    cut() {
      up = false;
      for (const { client, upstream } of [...pairs]) {
        client.resetAndDestroy();
        upstream.resetAndDestroy();
      }
      pairs.clear();
    },
    hold() {
      up = false;
      for (const { client, upstream } of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    holdFromClient() {
      up = false;
      for (const { client, upstream } of pairs) {
        client.unpipe(upstream);
        client.pause();
      }
    },
    restore() {
      up = true;
    },
    accepted: () => accepted,
    async close() {
      up = false;
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
