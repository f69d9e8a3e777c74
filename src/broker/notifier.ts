import { EventEmitter } from 'node:events';

/**
 * In-process change notifications: use cases announce "proposal X changed" after their transaction
 * commits; `wait_for_*` calls and the dashboard's event stream listen. A notification carries no data:
 * listeners re-read the store, so a missed or duplicated notification can never show a stale state.
 */
export class Notifier {
  private readonly emitter = new EventEmitter();

  constructor() {
    // Many agents may wait on many subjects at once; this is not a leak.
    this.emitter.setMaxListeners(0);
  }

  /** Announces that `topic` (e.g. `proposal:prop_…`) changed. */
  notify(topic: string): void {
    this.emitter.emit(topic);
    this.emitter.emit('*', topic);
  }

  /** Resolves true when `topic` is notified, false after `timeoutMs`, or when `signal` aborts. */
  waitFor(topic: string, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (value: boolean) => {
        clearTimeout(timer);
        this.emitter.off(topic, onTopic);
        signal?.removeEventListener('abort', onAbort);
        resolve(value);
      };
      const onTopic = () => done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      this.emitter.on(topic, onTopic);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Subscribes to every notification; returns the unsubscribe function. */
  onAny(listener: (topic: string) => void): () => void {
    this.emitter.on('*', listener);
    return () => this.emitter.off('*', listener);
  }
}
