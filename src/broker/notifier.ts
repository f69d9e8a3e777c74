import { EventEmitter } from 'node:events';

/** Internal topic emitted by close(); never a subject's topic. */
const CLOSE_TOPIC = '\0close';

/**
 * In-process change notifications: use cases announce "proposal X changed" after their transaction
 * commits; `wait_for_*` calls and the dashboard's event stream listen. A notification carries no data:
 * listeners re-read the store, so a missed or duplicated notification can never show a stale state.
 */
export class Notifier {
  private readonly emitter = new EventEmitter();
  private closed = false;

  constructor() {
    // Many agents may wait on many subjects at once; this is not a leak.
    this.emitter.setMaxListeners(0);
  }

  /** Announces that `topic` (e.g. `proposal:prop_…`) changed. */
  notify(topic: string): void {
    this.emitter.emit(topic);
    this.emitter.emit('*', topic);
  }

  /**
   * Resolves true when `topic` is notified, false after `timeoutMs`, when `signal` aborts, or when the
   * notifier closes (the master is stopping: waiters answer now instead of holding shutdown for 25 s).
   */
  waitFor(topic: string, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (value: boolean) => {
        clearTimeout(timer);
        this.emitter.off(topic, onTopic);
        this.emitter.off(CLOSE_TOPIC, onAbort);
        signal?.removeEventListener('abort', onAbort);
        resolve(value);
      };
      const onTopic = () => done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      this.emitter.on(topic, onTopic);
      this.emitter.on(CLOSE_TOPIC, onAbort);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** True once {@link close} was called; wait loops stop waiting. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Wakes every waiter with "nothing happened" and refuses new waits. */
  close(): void {
    this.closed = true;
    this.emitter.emit(CLOSE_TOPIC);
  }

  /** Subscribes to every notification; returns the unsubscribe function. */
  onAny(listener: (topic: string) => void): () => void {
    this.emitter.on('*', listener);
    return () => this.emitter.off('*', listener);
  }
}
