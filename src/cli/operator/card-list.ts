import { parseCommand } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { withMaster } from '../common/master-client.js';
import { emit, reportError } from '../common/output.js';
import { CARDS } from './command-specs.js';
import { type Card, cardsSection } from './status.js';

/** `gpu-broker cards`: the CARDS section of `gpu-broker status` alone (MIG slices under their card). */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(CARDS, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    return await withMaster(values, io, async (c) => {
      const { cards } = await c.get<{ cards: Card[] }>('/api/v1/cards');
      emit(io, values.json, { cards }, () => cardsSection(cards).join('\n'));
      return 0;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
