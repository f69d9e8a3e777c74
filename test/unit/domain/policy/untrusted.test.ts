import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HIDDEN_CHAR } from '../../../../src/contracts/hidden-chars.js';
import { QUOTE_MAX, quoteList, quoteUntrusted } from '../../../../src/domain/policy/untrusted.js';

/** quoteUntrusted: every submitter value in a finding message is one escaped, capped JSON string. */

const hiddenOrLine = fc.constantFrom(
  '\n',
  '\r',
  '\t',
  '\u0000',
  '\u001b',
  '\u007f',
  '\u0085',
  '\u061c',
  '\u200b',
  '\u200e',
  '\u2028',
  '\u202e',
  '\u2066',
  '\u2069',
  '\ufeff',
);
const untrusted = fc
  .array(fc.oneof(fc.string({ unit: 'binary' }), hiddenOrLine, fc.constant('"'), fc.constant('\\')))
  .map((parts) => parts.join(''));

describe('quoteUntrusted', () => {
  it('never emits a raw control, bidi or zero-width character, and is always one quoted string', () => {
    fc.assert(
      fc.property(untrusted, fc.integer({ min: 1, max: 200 }), (value, max) => {
        const quoted = quoteUntrusted(value, max);
        expect(HIDDEN_CHAR.test(quoted)).toBe(false);
        expect(quoted.startsWith('"') && quoted.endsWith('"')).toBe(true);
        // One JSON string literal: it parses back to the (capped) value.
        const back = JSON.parse(quoted) as string;
        const points = Array.from(value);
        expect(back).toBe(points.length > max ? `${points.slice(0, max).join('')}…` : value);
      }),
    );
  });

  it('caps long values with … and keeps short ones whole', () => {
    expect(quoteUntrusted('a'.repeat(100))).toBe(`"${'a'.repeat(QUOTE_MAX)}…"`);
    expect(quoteUntrusted('train.py')).toBe('"train.py"');
    expect(quoteUntrusted('x\u202ey\nVERIFIED SAFE')).toBe('"x\\u202ey\\nVERIFIED SAFE"');
  });

  it('quoteList quotes each value and says how many more', () => {
    expect(quoteList(['a', 'b', 'c'], 2)).toBe('"a", "b" and 1 more');
    expect(quoteList([])).toBe('');
  });
});
