/**
 * One table-driven transition function shared by every state machine: a table maps
 * (state, event) → next state; anything not in the table is refused. Nothing else assigns a state.
 */

/** A transition table: for each state, the events it accepts and where they lead. */
export type TransitionTable<S extends string, E extends string> = Readonly<
  Record<S, Readonly<Partial<Record<E, S>>>>
>;

/** The result of asking a machine to apply an event. */
export type TransitionResult<S extends string, E extends string> =
  | { ok: true; from: S; to: S; event: E }
  | { ok: false; from: S; event: E; allowed: E[] };

/** Applies `event` to `state` according to `table`. Pure. */
export function applyTransition<S extends string, E extends string>(
  table: TransitionTable<S, E>,
  state: S,
  event: E,
): TransitionResult<S, E> {
  const row = table[state];
  const to = row[event];
  if (to === undefined) return { ok: false, from: state, event, allowed: Object.keys(row) as E[] };
  return { ok: true, from: state, to, event };
}

/** States with no outgoing transitions. */
export function terminalStates<S extends string, E extends string>(table: TransitionTable<S, E>): S[] {
  return (Object.keys(table) as S[]).filter((s) => Object.keys(table[s]).length === 0);
}
