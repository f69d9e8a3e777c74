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

/** Whether `table` lets `event` move a record out of `state` (the guard every `can…` predicate derives). */
export function accepts<S extends string, E extends string>(
  table: TransitionTable<S, E>,
  state: S,
  event: E,
): boolean {
  return table[state][event] !== undefined;
}

/** Whether `state` has no outgoing transition: nothing moves a record out of it. */
export function isFinal<S extends string, E extends string>(table: TransitionTable<S, E>, state: S): boolean {
  return Object.keys(table[state]).length === 0;
}

/** States with no outgoing transitions. */
export function terminalStates<S extends string, E extends string>(table: TransitionTable<S, E>): S[] {
  return (Object.keys(table) as S[]).filter((s) => isFinal(table, s));
}
