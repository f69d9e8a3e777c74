/**
 * The dashboard's only way to the master: the REST API under /api/v1 and the event stream, both with
 * the signed-in token as a bearer header. The token lives in sessionStorage (this tab only, gone when
 * it closes) and never appears in a URL.
 */

const TOKEN_KEY = 'gpu-broker.token';

/** The signed-in token, or null. */
export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Stores the token for this tab. */
export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

/** Forgets the token. */
export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** An error answer of the API: `code`, `message` and `hint` as the master sent them. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = body && typeof body === 'object' ? body.error : undefined;
    super(error?.message ?? `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = error?.code ?? `HTTP_${status}`;
    this.hint = error?.hint ?? '';
  }
}

function authHeaders(token) {
  return { authorization: `Bearer ${token ?? getToken() ?? ''}` };
}

async function request(method, path, { body, token, headers } = {}) {
  const res = await fetch(path, {
    method,
    cache: 'no-store',
    headers: { ...authHeaders(token), ...(headers ?? {}) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  if (!res.ok) throw new ApiError(res.status, parsed);
  return parsed;
}

/** GET a JSON resource; `token` overrides the stored one (sign-in checks a token before storing it). */
export function apiGet(path, token) {
  return request('GET', path, { token });
}

/** POST a mutating call with a fresh Idempotency-Key (a retry of the same click would reuse it). */
export function apiPost(path, body, idempotencyKey = crypto.randomUUID()) {
  return request('POST', path, {
    body,
    headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
  });
}

/** Splits a server-sent-events block into its event name and data. */
function parseBlock(block) {
  let event = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) event = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(5).trim());
  }
  return { event, data: data.join('\n') };
}

/**
 * Follows `/api/v1/events` with fetch (EventSource cannot send a header) and reconnects with backoff.
 * Calls `onReady()` each time the stream opens, `onTopic(topic)` for each change, and
 * `onState(state)` with `connecting`, `live` or `unauthorized` (then it stops). Returns a stop function.
 */
export function followEvents({ onReady, onTopic, onState }) {
  let stopped = false;
  let controller = null;
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  const readStream = async (body, resetDelay) => {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replaceAll('\r\n', '\n');
      let end = buffer.indexOf('\n\n');
      while (end >= 0) {
        const { event, data } = parseBlock(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event === 'ready') {
          resetDelay();
          onState('live');
          onReady();
        } else if (event === 'change' && data) onTopic(data);
        end = buffer.indexOf('\n\n');
      }
    }
  };

  const run = async () => {
    let delay = 1000;
    while (!stopped) {
      onState('connecting');
      controller = new AbortController();
      try {
        const res = await fetch('/api/v1/events', {
          headers: authHeaders(),
          cache: 'no-store',
          signal: controller.signal,
        });
        if (res.status === 401 || res.status === 403) {
          onState('unauthorized');
          return;
        }
        if (res.ok && res.body)
          await readStream(res.body, () => {
            delay = 1000;
          });
      } catch {
        // Network error or abort: retry below unless stopped.
      }
      if (stopped) return;
      onState('connecting');
      await sleep(delay);
      delay = Math.min(delay * 2, 15000);
    }
  };

  void run();
  return () => {
    stopped = true;
    controller?.abort();
  };
}
