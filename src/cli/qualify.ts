import type { CommandRunner } from './io.js';

/** Placeholder while this command is being written in this change set. */
export const run: CommandRunner = async (_argv, io) => {
  io.stderr('this command is not available yet\n');
  return 1;
};
