import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { admissionSection } from './admission.js';
import { agentLoopSection } from './agent-loop.js';
import { auditCheckSection } from './audit-check.js';
import { e2eSection } from './e2e.js';
import { fairnessSection } from './fairness.js';
import { inputsSection } from './inputs.js';
import { mcpLoadSection } from './mcp-load.js';
import { modelQuotasSection } from './model-quotas.js';
import { noisySection, noisyToolsSection } from './noisy-neighbour.js';
import { reclaimSection } from './reclaim.js';
import { schedulingSection } from './scheduling.js';
import { schedulingMigSection } from './scheduling-mig.js';
import { slurmSection } from './slurm.js';
import { type BenchSection, markdownTable, type OpResult } from './stats.js';
import { storeUpkeepSection } from './store-upkeep.js';
import { taskStartSection } from './task-start.js';
import { tasksSection } from './tasks.js';
import { testBoundsSection } from './test-bounds.js';

/**
 * `npm run bench`: runs each benchmark section in turn and prints one table. A section starts what it
 * needs (usually a master in a child process), measures, and stops it again; sections are independent.
 *
 *   node dist/bench/run.js [--only NAME[,NAME]] [--json FILE]
 *
 * To add a section (worker admission latency, scheduler throughput, …), export a BenchSection from its
 * own file and append it to SECTIONS.
 */

const SECTIONS: BenchSection[] = [
  mcpLoadSection,
  admissionSection,
  schedulingSection,
  schedulingMigSection,
  auditCheckSection,
  inputsSection,
  storeUpkeepSection,
  slurmSection,
  noisySection,
  noisyToolsSection,
  tasksSection,
  taskStartSection,
  agentLoopSection,
  testBoundsSection,
  fairnessSection,
  modelQuotasSection,
  reclaimSection,
  e2eSection,
];

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { only: { type: 'string' }, json: { type: 'string' } } });
  const only = values.only?.split(',');
  const chosen = SECTIONS.filter((s) => !only || only.includes(s.name));
  if (chosen.length === 0) {
    console.error(`no such section; sections: ${SECTIONS.map((s) => s.name).join(', ')}`);
    return 2;
  }
  const cpus = (await import('node:os')).cpus();
  console.log(`gpu-broker bench — node ${process.version}, ${cpus.length} × ${cpus[0]?.model ?? 'cpu'}`);
  const rows: OpResult[] = [];
  for (const section of chosen) {
    console.log(`\n## ${section.name}: ${section.description}`);
    const started = performance.now();
    const result = await section.run();
    rows.push(...result);
    console.log(markdownTable(result));
    console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s)`);
  }
  if (values.json) writeFileSync(values.json, `${JSON.stringify(rows, null, 2)}\n`);
  return rows.some((r) => r.errors > 0) ? 1 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  },
);
