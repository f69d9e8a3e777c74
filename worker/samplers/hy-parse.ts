import { SamplerError } from './card-sampler.js';
import { clip, parseIndex, parseNumber } from './smi-values.js';

/**
 * Pure parsers for Hygon `hy-smi` output (samples in test/unit/worker/samplers/): the default table, read by
 * header names, and the `DCU[i] : key: value` detail modes (`--showmeminfo vram`, `--showproductname`),
 * whose `--json` variants have been seen with text around the JSON and with missing commas inside it.
 */

/** One row of the default table; a column the table lacks or did not measure is null. */
export interface HyTableRow {
  index: number;
  temperature_c: number | null;
  power_w: number | null;
  /** VRAM in use, percent; hy-smi's table gives no MiB. */
  vram_pct: number | null;
  utilization_pct: number | null;
}

/** Header names per reading, first match wins; later hyhal releases say HCU where older ones say DCU. */
const COLUMNS = {
  index: ['dcu', 'hcu', 'gpu', 'device'],
  temperature_c: ['temp', 'temperature'],
  power_w: ['avgpwr', 'pwr', 'power'],
  vram_pct: ['vram%'],
  utilization_pct: ['dcu%', 'hcu%', 'gpu%'],
} as const;

/** Banner and footer lines: `=== System Management Interface ===`, `=== End of SMI Log ===`, rules. */
const BANNER = /^=|system management interface|end of smi log/i;

function parseFailed(message: string, line: string): SamplerError {
  return new SamplerError('PARSE_FAILED', `hy-smi output not understood: ${message}: "${clip(line, 200)}"`, {
    tool: 'hy-smi',
    output: clip(line, 200),
  });
}

/** A card index as printed: `0`, `card0` or `DCU[0]`. */
function cardIndex(token: string): number | null {
  const match = /^(?:card|dcu|hcu|gpu)?\[?(\d+)\]?$/i.exec(token.trim());
  return match?.[1] ? parseIndex(match[1]) : null;
}

/**
 * Rows of the default table, ordered by index. Lines before the header (banners, warnings) are
 * skipped; after it, a line starting with a card index must have one value per header column, else
 * `PARSE_FAILED` (guessing a column would misreport a card). No header at all is `PARSE_FAILED` too.
 */
export function parseHyTable(text: string): HyTableRow[] {
  let header: string[] | null = null;
  const rows: HyTableRow[] = [];
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || BANNER.test(line)) continue;
    const tokens = line.split(/\s+/);
    if (header === null) {
      if ((COLUMNS.index as readonly string[]).includes(tokens[0]?.toLowerCase() ?? '')) {
        header = tokens.map((token) => token.toLowerCase());
      }
      continue;
    }
    const index = cardIndex(tokens[0] ?? '');
    if (index === null || index > 255) continue;
    if (tokens.length !== header.length) throw parseFailed(`expected ${header.length} columns`, line);
    const read = (names: readonly string[]): number | null => {
      const at = header?.findIndex((name) => names.includes(name)) ?? -1;
      return at < 0 ? null : parseNumber(tokens[at] ?? '');
    };
    rows.push({
      index,
      temperature_c: read(COLUMNS.temperature_c),
      power_w: read(COLUMNS.power_w),
      vram_pct: read(COLUMNS.vram_pct),
      utilization_pct: read(COLUMNS.utilization_pct),
    });
  }
  if (header === null)
    throw parseFailed('no header line (DCU Temp AvgPwr …)', text.trim().split('\n')[0] ?? '');
  return rows.sort((a, b) => a.index - b.index);
}

/**
 * Per-card `key → value` from a detail mode, keys lower-cased. Reads both forms:
 * text lines `DCU[0]   : vram Total Memory (MiB): 65520`, and JSON-like `"card0": {"key": "value", …}`
 * scanned with patterns rather than JSON.parse, so surrounding text or a missing comma loses nothing.
 */
export function parseHyDetails(text: string): Map<number, Map<string, string>> {
  const cards = new Map<number, Map<string, string>>();
  const put = (index: number, key: string, value: string): void => {
    const card = cards.get(index) ?? new Map<string, string>();
    card.set(key.trim().toLowerCase(), value.trim());
    cards.set(index, card);
  };
  for (const line of text.split(/\r?\n/)) {
    const match = /^\s*(?:dcu|hcu|gpu)\[(\d+)\]\s*:\s*([^:]+?)\s*:\s*(.*?)\s*$/i.exec(line);
    if (match?.[1] && match[2]) put(Number(match[1]), match[2], match[3] ?? '');
  }
  for (const block of text.matchAll(/"card(\d+)"\s*:\s*\{([^{}]*)\}/gi)) {
    const index = Number(block[1]);
    for (const pair of (block[2] ?? '').matchAll(/"([^"]+)"\s*:\s*"?([^",}]*)"?/g)) {
      if (pair[1]) put(index, pair[1], pair[2] ?? '');
    }
  }
  return cards;
}

/** VRAM of one card from its details, in MiB; values given in bytes are converted. */
export function hyMemory(details: ReadonlyMap<string, string> | undefined): {
  memory_total_mib: number | null;
  memory_used_mib: number | null;
} {
  const mib = (what: 'total' | 'total used'): number | null => {
    const inMib = details?.get(`vram ${what} memory (mib)`);
    if (inMib !== undefined) return parseNumber(inMib);
    const inBytes = details?.get(`vram ${what} memory (b)`);
    const bytes = inBytes === undefined ? null : parseNumber(inBytes);
    return bytes === null ? null : Math.round(bytes / 1024 / 1024);
  };
  return { memory_total_mib: mib('total'), memory_used_mib: mib('total used') };
}

/** The card's product name (`Card Series` / `Card model`), or null when not reported. */
export function hyModel(details: ReadonlyMap<string, string> | undefined): string | null {
  const name = details?.get('card series') ?? details?.get('card model') ?? details?.get('card sku');
  return name && name.toLowerCase() !== 'n/a' ? clip(name, 128) : null;
}
