import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { firstInvalidUtf8, inspectText } from '../../../../src/domain/policy/text-inspection.js';

/** Display versus run: what the pure inspection of an input's bytes reports, and where. */

const utf8 = (s: string) => new TextEncoder().encode(s);

describe('inspectText', () => {
  it('plain UTF-8 source, CRLF line ends, tabs and a leading BOM are fine', () => {
    expect(inspectText('a.py', utf8('\ufeffimport os\r\n\tprint("héllo ✓")\r\n'))).toEqual({
      text: true,
      oddities: [],
      count: 0,
    });
  });

  it('names the line of a lone CR, bidi controls, zero-width characters and other controls', () => {
    const src = [
      'ok = 1',
      'x = 1\r# looks like a comment',
      'if access != "user\u202e \u2066// admin\u2069 \u2066":',
      'pa\u200bss = 2',
      'y = "\u001b[2J"',
      'z = "\ufeff"',
    ].join('\n');
    const r = inspectText('a.py', utf8(src));
    expect(r.text).toBe(true);
    expect(r.count).toBe(8);
    expect(r.oddities.map((o) => o.line)).toEqual([2, 3, 3, 3, 3]);
    expect(r.oddities[0]?.what).toContain('lone carriage return');
    expect(r.oddities[1]?.what).toContain('bidi control');
    expect(r.oddities[1]?.what).toContain('U+202E');
    expect(r.oddities[4]?.what).toContain('bidi');
  });

  it('reports a Python coding cookie other than UTF-8, quoted', () => {
    const r = inspectText('a.py', utf8('#!/usr/bin/python3\n# -*- coding: utf-7 -*-\nprint(1)\n'));
    expect(r.oddities).toEqual([{ line: 2, what: expect.stringContaining('"utf-7"') }]);
    expect(inspectText('a.py', utf8('# coding: utf-8\n')).count).toBe(0);
    expect(inspectText('a.py', utf8('# vim: set fileencoding=latin-1 :\n')).count).toBe(1);
  });

  it('bytes that are not UTF-8 are not text, and a warning only in a file that looks like source', () => {
    const latin1 = Uint8Array.from([...utf8('print("caf'), 0xe9, ...utf8('")\n')]);
    const src = inspectText('main.py', Uint8Array.from([...utf8('a = 1\n'), ...latin1]));
    expect(src.text).toBe(false);
    expect(src.oddities).toEqual([{ line: 2, what: expect.stringContaining('not valid UTF-8') }]);
    expect(inspectText('weights.bin', latin1)).toEqual({ text: false, oddities: [], count: 0 });
    expect(inspectText('run', Uint8Array.from([0x23, 0x21, 0x00]))).toMatchObject({ text: false, count: 1 });
    expect(inspectText('model.pt', Uint8Array.from([0x50, 0x4b, 0x00, 0x01]))).toMatchObject({ text: false });
  });
});

describe('firstInvalidUtf8', () => {
  it('agrees with a fatal TextDecoder on well-formedness', () => {
    const cases = [
      [0xc0, 0x80], // overlong
      [0xed, 0xa0, 0x80], // surrogate
      [0xf4, 0x90, 0x80, 0x80], // above U+10FFFF
      [0xe2, 0x82], // truncated
      [0x41, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80],
    ];
    for (const c of cases) {
      const bytes = Uint8Array.from(c);
      let valid = true;
      try {
        new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      } catch {
        valid = false;
      }
      expect(firstInvalidUtf8(bytes) === -1).toBe(valid);
    }
    expect(firstInvalidUtf8(Uint8Array.from([0x41, 0xff]))).toBe(1);
  });

  it('agrees with a fatal TextDecoder on arbitrary bytes, and the inspection never throws', () => {
    const bytes = fc.oneof(
      fc.uint8Array({ maxLength: 64 }),
      fc.string({ unit: 'binary', maxLength: 32 }).map((s) => new TextEncoder().encode(s)),
    );
    fc.assert(
      fc.property(bytes, (b) => {
        let valid = true;
        try {
          new TextDecoder('utf-8', { fatal: true }).decode(b);
        } catch {
          valid = false;
        }
        expect(firstInvalidUtf8(b) === -1).toBe(valid);
        const r = inspectText('x.py', b);
        expect(r.count).toBeGreaterThanOrEqual(r.oddities.length);
      }),
      { numRuns: 500 },
    );
  });
});

describe('the fast path (inspection inside create_proposal must be cheap)', () => {
  it('a large clean file reports nothing; one hidden character at its end is still found, on its line', () => {
    const clean = 'x = compute(a, b)  # ordinary\n'.repeat(70_000); // ~2 MiB
    expect(inspectText('big.py', Buffer.from(clean))).toEqual({ text: true, oddities: [], count: 0 });
    const found = inspectText('big.py', Buffer.from(`${clean}y = 1 \u202e\n`));
    expect(found.count).toBe(1);
    expect(found.oddities[0]).toMatchObject({ line: 70_001, what: expect.stringMatching(/^a bidi control/) });
  });

  it('ill-formed UTF-8 the native decoder refuses is reported at the byte the walk names', () => {
    for (const bad of [
      [0xc0, 0xaf], // overlong "/"
      [0xed, 0xa0, 0x80], // a UTF-16 surrogate
      [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
    ]) {
      const bytes = Buffer.concat([Buffer.from('ok\nok\n'), Buffer.from(bad)]);
      expect(firstInvalidUtf8(bytes)).toBe(6);
      expect(inspectText('a.py', bytes)).toMatchObject({ text: false, count: 1, oddities: [{ line: 3 }] });
    }
  });
});
