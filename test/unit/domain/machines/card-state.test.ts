import { describe, expect, it } from 'vitest';
import {
  CARD_STATES,
  type CardStateConfig,
  type CardStateInput,
  deriveCardState,
  isEligible,
} from '../../../../src/domain/machines/card-state.js';

const NOW = 1_000_000;
const CONFIG: CardStateConfig = { sample_interval_ms: 2000 };

type CardOverrides = Partial<CardStateInput['card']>;
type WorkerOverrides = Partial<CardStateInput['worker']>;

function input(card: CardOverrides = {}, worker: WorkerOverrides = {}): CardStateInput {
  return {
    card: {
      memory_used_mib: 0,
      memory_total_mib: 81920,
      health: 'ok',
      health_reasons: [],
      processes: [],
      simulated: false,
      cordoned: false,
      leased: false,
      quarantined: false,
      broker_pids: [],
      ...card,
    },
    worker: { online: true, sampled_at: NOW - 1000, sampler_error: null, ...worker },
  };
}

function stateOf(card: CardOverrides = {}, worker: WorkerOverrides = {}) {
  return deriveCardState(input(card, worker), NOW, CONFIG);
}

describe('deriveCardState', () => {
  it('is AVAILABLE with no reasons for a fresh, idle, healthy card', () => {
    expect(stateOf()).toEqual({ state: 'AVAILABLE', reasons: [] });
    expect(isEligible(input(), NOW, CONFIG)).toBe(true);
  });

  it('treats a sample older than 3 intervals as UNKNOWN and not eligible', () => {
    expect(stateOf({}, { sampled_at: NOW - 6000 }).state).toBe('AVAILABLE');
    const stale = stateOf({}, { sampled_at: NOW - 6001 });
    expect(stale.state).toBe('UNKNOWN');
    expect(stale.reasons[0]).toMatch(/stale/);
    expect(isEligible(input({}, { sampled_at: NOW - 6001 }), NOW, CONFIG)).toBe(false);
  });

  it('is UNKNOWN when the worker is offline, never sampled, or its sampler fails', () => {
    expect(stateOf({}, { online: false })).toEqual({ state: 'UNKNOWN', reasons: ['worker offline'] });
    expect(stateOf({}, { sampled_at: null }).state).toBe('UNKNOWN');
    const failing = stateOf({}, { sampler_error: 'nvidia-smi: not found' });
    expect(failing.state).toBe('UNKNOWN');
    expect(failing.reasons[0]).toContain('nvidia-smi: not found');
  });

  it('does not report observations from a stale sample', () => {
    const r = stateOf(
      { health: 'failed', processes: [{ pid: 9, name: 'x', used_memory_mib: 1 }] },
      { online: false },
    );
    expect(r).toEqual({ state: 'UNKNOWN', reasons: ['worker offline'] });
  });

  it('is BUSY_FOREIGN when VRAM is over the threshold (default 2 %)', () => {
    // 2 % of 10000 MiB = 200 MiB: at the threshold the card is still idle, above it busy.
    expect(stateOf({ memory_total_mib: 10000, memory_used_mib: 200 }).state).toBe('AVAILABLE');
    const busy = stateOf({ memory_total_mib: 10000, memory_used_mib: 201 });
    expect(busy.state).toBe('BUSY_FOREIGN');
    expect(busy.reasons[0]).toMatch(/VRAM 201 of 10000 MiB/);
    const strict = deriveCardState(input({ memory_total_mib: 10000, memory_used_mib: 101 }), NOW, {
      ...CONFIG,
      vram_threshold_pct: 1,
    });
    expect(strict.state).toBe('BUSY_FOREIGN');
  });

  it('is BUSY_FOREIGN for a compute process the broker did not start, but not for its own', () => {
    const proc = { pid: 4242, name: 'python', used_memory_mib: 10 };
    const foreign = stateOf({ processes: [proc] });
    expect(foreign.state).toBe('BUSY_FOREIGN');
    expect(foreign.reasons[0]).toContain('python (pid 4242)');
    expect(stateOf({ processes: [proc], broker_pids: [4242] }).state).toBe('AVAILABLE');
  });

  it('is UNHEALTHY for failed or degraded health, but not for unknown health', () => {
    const failed = stateOf({ health: 'failed', health_reasons: ['ecc.uncorrected=3'] });
    expect(failed).toEqual({ state: 'UNHEALTHY', reasons: ['health failed: ecc.uncorrected=3'] });
    expect(stateOf({ health: 'degraded' }).state).toBe('UNHEALTHY');
    expect(stateOf({ health: 'unknown' }).state).toBe('AVAILABLE');
  });

  it('does not count a real card with unmeasured memory as eligible', () => {
    const r = stateOf({ memory_used_mib: null });
    expect(r.state).toBe('UNKNOWN');
    expect(r.reasons[0]).toMatch(/memory use not measured/);
    expect(stateOf({ memory_total_mib: null }).state).toBe('UNKNOWN');
  });

  it('counts a simulated card with unmeasured memory as idle', () => {
    expect(stateOf({ simulated: true, memory_used_mib: null, memory_total_mib: null }).state).toBe(
      'AVAILABLE',
    );
  });

  it('prefers a fault that was seen over memory that was not measured', () => {
    expect(stateOf({ memory_used_mib: null, health: 'failed' }).state).toBe('UNHEALTHY');
  });

  it('shows our own records over a silent worker: QUARANTINED, then LEASED, then CORDONED', () => {
    const offline = { online: false };
    expect(stateOf({ quarantined: true, leased: true, cordoned: true }, offline).state).toBe('QUARANTINED');
    const leased = stateOf({ leased: true, cordoned: true }, offline);
    expect(leased.state).toBe('LEASED');
    expect(leased.reasons).toEqual(['leased by the broker', 'cordoned by an operator', 'worker offline']);
    expect(stateOf({ cordoned: true }, offline).state).toBe('CORDONED');
  });

  it('still reports a stranger on a leased card', () => {
    const r = stateOf({
      leased: true,
      broker_pids: [1],
      processes: [{ pid: 2, name: 'miner', used_memory_mib: 5 }],
    });
    expect(r.state).toBe('LEASED');
    expect(r.reasons[1]).toContain('miner (pid 2)');
  });

  it('ranks UNHEALTHY over BUSY_FOREIGN', () => {
    const r = stateOf({ health: 'failed', memory_used_mib: 80000 });
    expect(r.state).toBe('UNHEALTHY');
    expect(r.reasons).toHaveLength(2);
  });

  it('lists every state once', () => {
    expect(new Set(CARD_STATES).size).toBe(7);
  });
});

describe('cards that report VRAM only as a percentage (hy-smi table)', () => {
  const base = {
    memory_used_mib: null,
    memory_total_mib: null,
    health: 'unknown' as const,
    health_reasons: [],
    processes: [],
    simulated: false,
    cordoned: false,
    leased: false,
    quarantined: false,
    broker_pids: [],
  };
  const worker = { online: true, sampled_at: 1000, sampler_error: null };
  const config = { sample_interval_ms: 2000 };

  it('is AVAILABLE when the percentage is under the threshold', () => {
    expect(deriveCardState({ card: { ...base, memory_used_pct: 0 }, worker }, 1000, config).state).toBe(
      'AVAILABLE',
    );
  });

  it('is BUSY_FOREIGN when the percentage is over the threshold', () => {
    const r = deriveCardState({ card: { ...base, memory_used_pct: 35 }, worker }, 1000, config);
    expect(r.state).toBe('BUSY_FOREIGN');
    expect(r.reasons[0]).toContain('35 %');
  });

  it('stays UNKNOWN when neither MiB nor percent is reported', () => {
    expect(deriveCardState({ card: { ...base, memory_used_pct: null }, worker }, 1000, config).state).toBe(
      'UNKNOWN',
    );
  });
});
