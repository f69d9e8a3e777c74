import { describe, expect, it } from 'vitest';
import { SamplerError } from '../../../../worker/samplers/card-sampler.js';
import { hyMemory, hyModel, parseHyDetails, parseHyTable } from '../../../../worker/samplers/hy-parse.js';

// Literal text as a real hy-smi prints it.
const TABLE = `============================ System Management Interface =============================
======================================================================================
DCU     Temp     AvgPwr     Perf     PwrCap     VRAM%      DCU%      Mode
0       49.0C    118.0W     auto     800.0W     0%         0%        Normal
1       48.0C    120.0W     auto     800.0W     0%         0%        Normal
======================================================================================
=================================== End of SMI Log ===================================
`;

describe('parseHyTable', () => {
  it('reads the documented table by header names, skipping banners', () => {
    expect(parseHyTable(TABLE)).toEqual([
      { index: 0, temperature_c: 49, power_w: 118, vram_pct: 0, utilization_pct: 0 },
      { index: 1, temperature_c: 48, power_w: 120, vram_pct: 0, utilization_pct: 0 },
    ]);
  });

  it('handles decimals, manual Perf, N/A, reordered columns and the HCU naming', () => {
    const text = `=== System Management Interface ===
HCU   Mode     Temp    AvgPwr   Perf     VRAM%   HCU%
1     Normal   N/A     300.5W   manual   37%     99.5%
0     Normal   51.5C   N/A      auto     0%      0.0%
=== End of SMI Log ===`;
    expect(parseHyTable(text)).toEqual([
      { index: 0, temperature_c: 51.5, power_w: null, vram_pct: 0, utilization_pct: 0 },
      { index: 1, temperature_c: null, power_w: 300.5, vram_pct: 37, utilization_pct: 99.5 },
    ]);
  });

  it('gives null for a column the table does not have', () => {
    const [row] = parseHyTable('DCU Temp\n0 40.0C\n');
    expect(row).toEqual({
      index: 0,
      temperature_c: 40,
      power_w: null,
      vram_pct: null,
      utilization_pct: null,
    });
  });

  it('fails on a row that does not match the header, or no header', () => {
    expect(() => parseHyTable('DCU Temp AvgPwr\n0 40.0C\n')).toThrow(SamplerError);
    expect(() => parseHyTable('hy-smi: no devices\n')).toThrow(/no header/);
  });
});

describe('parseHyDetails', () => {
  it('reads DCU[i] text lines', () => {
    const text = `============================ System Management Interface =============================
DCU[0]          : Card Series: K100_AI
DCU[0]          : vram Total Memory (MiB): 65520
DCU[0]          : vram Total Used Memory (MiB): 1166
=================================== End of SMI Log ===================================`;
    const card = parseHyDetails(text).get(0);
    expect(hyMemory(card)).toEqual({ memory_total_mib: 65520, memory_used_mib: 1166 });
    expect(hyModel(card)).toBe('K100_AI');
  });

  it('extracts JSON mixed with text and with missing commas', () => {
    const text =
      'WARNING: something\n{"card0":{"Average Graphics Package Power (W)":"80.0""HCU use (%)":"0.0",' +
      '"vram Total Used Memory (MiB)":"1166","vram Total Memory (MiB)":"65520"},' +
      '"card1":{"VRAM Total Memory (B)":"68702699520","VRAM Total Used Memory (B)":"10485760"}}\nEnd of SMI Log';
    const details = parseHyDetails(text);
    expect(hyMemory(details.get(0))).toEqual({ memory_total_mib: 65520, memory_used_mib: 1166 });
    expect(hyMemory(details.get(1))).toEqual({ memory_total_mib: 65520, memory_used_mib: 10 });
    expect(details.get(0)?.get('average graphics package power (w)')).toBe('80.0');
  });

  it('gives nulls for a card it knows nothing about', () => {
    expect(hyMemory(undefined)).toEqual({ memory_total_mib: null, memory_used_mib: null });
    expect(hyModel(undefined)).toBeNull();
  });
});
