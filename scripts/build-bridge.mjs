// Bundles the stdio MCP bridge (client-kit/stdio-bridge-main.ts and everything it imports: the MCP
// SDK, zod, ajv, undici) into one file that needs only Node >= 20.19, for agent machines where the
// gpu-broker package (and its native better-sqlite3) is not installed. `npm run build:bridge`.
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the bundle goes; `client-kit build` copies it into a kit from here. */
export const BRIDGE_BUNDLE = join(root, 'dist', 'client-kit', 'gpu-broker-stdio-bridge.mjs');

mkdirSync(dirname(BRIDGE_BUNDLE), { recursive: true });
const result = await build({
  entryPoints: [join(root, 'client-kit', 'stdio-bridge-main.ts')],
  outfile: BRIDGE_BUNDLE,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20.19',
  legalComments: 'eof',
  // Whitespace and syntax only: identifiers stay readable for anyone auditing what they run.
  minifyWhitespace: true,
  minifySyntax: true,
  logLevel: 'warning',
  metafile: true,
  // Some bundled CommonJS packages (ajv) call require(); an ES module has none unless it makes one.
  banner: {
    js: "import { createRequire as __gpuBrokerCreateRequire } from 'node:module';\nconst require = __gpuBrokerCreateRequire(import.meta.url);",
  },
});
const bytes = Object.values(result.metafile.outputs)[0]?.bytes ?? 0;
// `npm run build --silent` (what `npm start` runs) asks for quiet: the path is printed only when asked.
if (process.env.npm_config_loglevel !== 'silent')
  process.stdout.write(`${BRIDGE_BUNDLE} (${Math.round(bytes / 1024)} KiB)\n`);
