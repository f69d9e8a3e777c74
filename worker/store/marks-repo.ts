import type { LocalDb } from './db.js';

/**
 * The worker's fences: per card, the highest lease epoch seen (`card_epochs`), and per master boot, the
 * highest master seq processed (`master_marks`). The TSDoc of each method is on `LocalStore`.
 */

/** How many master boot ids a `hello` may carry (contracts: `master_marks` max 16). */
const MAX_MASTER_MARKS = 16;

/** Result of an epoch check: accepted, or refused naming the card whose mark is higher. */
export type EpochCheck =
  | { readonly ok: true }
  | {
      readonly ok: false;
      readonly code: 'STALE_EPOCH';
      readonly card_index: number;
      readonly recorded_epoch: number;
    };

/** A highest processed seq for one master boot. */
export interface MasterMark {
  readonly boot_id: string;
  readonly seq: number;
}

function prepareMarks(db: LocalDb) {
  return {
    cardEpoch: db.prepare<[number], { epoch: number }>('SELECT epoch FROM card_epochs WHERE card_index = ?'),
    cardEpochs: db.prepare<[], { index: number; epoch: number }>(
      'SELECT card_index AS "index", epoch FROM card_epochs ORDER BY card_index LIMIT 1024',
    ),
    raiseCard: db.prepare<[number, number]>(
      `INSERT INTO card_epochs (card_index, epoch) VALUES (?, ?)
       ON CONFLICT (card_index) DO UPDATE SET epoch = max(epoch, excluded.epoch)`,
    ),
    masterMark: db.prepare<[string], { seq: number }>('SELECT seq FROM master_marks WHERE boot_id = ?'),
    raiseMaster: db.prepare<[string, number, number]>(
      `INSERT INTO master_marks (boot_id, seq, updated_at) VALUES (?, ?, ?)
       ON CONFLICT (boot_id) DO UPDATE SET seq = excluded.seq, updated_at = excluded.updated_at
       WHERE excluded.seq > seq`,
    ),
    listMaster: db.prepare<[number], MasterMark>(
      'SELECT boot_id, seq FROM master_marks ORDER BY updated_at DESC, boot_id LIMIT ?',
    ),
    pruneMaster: db.prepare<[number]>(
      `DELETE FROM master_marks WHERE boot_id NOT IN
         (SELECT boot_id FROM master_marks ORDER BY updated_at DESC, boot_id LIMIT ?)`,
    ),
  };
}

/** The card-epoch and master-mark methods of `LocalStore`, over `db`. */
export function marksRepo(db: LocalDb, now: () => number) {
  const stmts = prepareMarks(db);
  const getCardEpoch = (cardIndex: number): number => stmts.cardEpoch.get(cardIndex)?.epoch ?? 0;

  const checkAndRaiseEpoch = db.transaction(
    (cardIndexes: readonly number[], epoch: number, strict: boolean): EpochCheck => {
      // Check every card before raising any, so a refusal leaves no mark behind.
      for (const card of cardIndexes) {
        const recorded = getCardEpoch(card);
        if (recorded > epoch || (strict && recorded === epoch))
          return { ok: false, code: 'STALE_EPOCH', card_index: card, recorded_epoch: recorded };
      }
      for (const card of cardIndexes) stmts.raiseCard.run(card, epoch);
      return { ok: true };
    },
  );

  const raiseMasterMark = db.transaction((bootId: string, seq: number): boolean => {
    const changed = stmts.raiseMaster.run(bootId, seq, now()).changes > 0;
    // A hello carries at most 16 marks; older master boots are long gone and will not resend.
    if (changed) stmts.pruneMaster.run(MAX_MASTER_MARKS);
    return changed;
  });

  return {
    checkAndRaiseEpoch: (cards: readonly number[], epoch: number, opts: { strict?: boolean } = {}) =>
      checkAndRaiseEpoch.immediate(cards, epoch, opts.strict ?? false),
    getCardEpoch,
    listCardEpochs: (): Array<{ index: number; epoch: number }> => stmts.cardEpochs.all(),
    getMasterMark: (bootId: string): number => stmts.masterMark.get(bootId)?.seq ?? 0,
    raiseMasterMark: (bootId: string, seq: number): boolean => raiseMasterMark.immediate(bootId, seq),
    listMasterMarks: (): MasterMark[] => stmts.listMaster.all(MAX_MASTER_MARKS),
  };
}
