import { readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { BrokerError } from '../contracts/errors.js';
import { packageRoot } from '../platform/package-root.js';

/**
 * The dashboard at `/`: plain static files from `src/http/dashboard/` (vanilla ES modules, no build
 * step), read from the package root so the same code serves them from `src/` and from `dist/`. The page
 * and its assets hold no data and are public (auth.ts `isPublicPath`); everything they show comes from
 * the REST API and `/api/v1/events` with the bearer token the user signs in with.
 */

/** Folder of the dashboard's files, relative to the package root. */
export const DASHBOARD_DIR = join('src', 'http', 'dashboard');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * Same-origin scripts, styles and requests only; no inline code, no framing. The page sets widths through
 * the CSSOM (`el.style.width`), which `style-src 'self'` allows.
 */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-cache',
};

interface Asset {
  type: string;
  body: Buffer;
}

/** Reads every servable file of the dashboard folder once (a missing folder fails the start). */
function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const name of readdirSync(dir)) {
    const type = TYPES[extname(name)];
    if (type) assets.set(name, { type, body: readFileSync(join(dir, name)) });
  }
  return assets;
}

function send(reply: FastifyReply, asset: Asset): FastifyReply {
  return reply.headers(SECURITY_HEADERS).type(asset.type).send(asset.body);
}

/** Registers `/`, `/assets/:name` and `/favicon.ico`. */
export function registerDashboard(app: FastifyInstance, dir = join(packageRoot(), DASHBOARD_DIR)): void {
  const assets = loadAssets(dir);
  const index = assets.get('index.html');
  if (!index) throw new Error(`dashboard: ${dir}/index.html is missing`);
  const icon = assets.get('favicon.svg');

  app.get('/', async (_req, reply) => send(reply, index));
  app.get<{ Params: { name: string } }>('/assets/:name', async (req, reply) => {
    const asset = req.params.name === 'index.html' ? undefined : assets.get(req.params.name);
    if (!asset)
      throw new BrokerError('NOT_FOUND', `no dashboard asset ${req.params.name}`, 'Open / instead.');
    return send(reply, asset);
  });
  app.get('/favicon.ico', async (_req, reply) => (icon ? send(reply, icon) : reply.code(204).send()));
}
