/**
 * The one reviewed list of files `gpu-broker run` and `propose --dir` refuse to ship unless named with
 * `--include-secret PATH` (docs/security.md "gpu-broker run on the submitter’s machine"): credentials by name, and private keys by content wherever they
 * hide. Each row says why. Names compare case-insensitively (a case-insensitive file system opens `.ENV`
 * for `.env`, and an upper-case copy is still the secret); a row matches at any depth (`sub/.aws/…`).
 *
 * Not refused on purpose: `.env.example`, `.env.sample`, `.env.template` (templates committed for
 * everyone to read by convention), `*.pub` (public halves), a `*.pem` that is a certificate (only one
 * holding a private key is refused, by its content). A false positive costs one `--include-secret`; a
 * missed secret costs the secret, so a row is added when in doubt.
 */

/** One kind of credential file. */
export interface SecretRow {
  /** How the row reads in an error: a name, a glob or a directory. */
  pattern: string;
  /** Why it is refused. */
  why: string;
  /** Whether the row matches a path, given its lower-cased `/`-separated segments. */
  matches: (segments: readonly string[]) => boolean;
}

const base = (s: readonly string[]) => s[s.length - 1] ?? '';
const name = (n: string) => (s: readonly string[]) => base(s) === n;
const glob = (re: RegExp) => (s: readonly string[]) => re.test(base(s));
/** A directory whose every file is refused, at any depth. */
const under = (dir: string) => (s: readonly string[]) => s.slice(0, -1).includes(dir);
/** A path ending in these segments (`.docker/config.json` at any depth). */
const tail =
  (...end: string[]) =>
  (s: readonly string[]) =>
    s.length >= end.length && end.every((e, i) => s[s.length - end.length + i] === e);

/** The list. Keep it sorted by family; a row's test is in test/unit/cli/agent/ship-selection.test.ts. */
export const SECRET_FILES: readonly SecretRow[] = [
  {
    pattern: '.env',
    why: 'an environment file: API keys and passwords by convention',
    matches: name('.env'),
  },
  {
    pattern: '.env.*',
    why: 'an environment file (.env.example, .env.sample and .env.template are templates and ship)',
    matches: glob(/^\.env\.(?!(?:example|sample|template)$).+$/),
  },
  { pattern: '*.env', why: 'an environment file (env_file of docker compose)', matches: glob(/.\.env$/) },
  { pattern: '.envrc', why: "direnv's environment: exported tokens", matches: name('.envrc') },
  {
    pattern: 'secrets.{json,yaml,yml,toml,ini}',
    why: 'named as secrets',
    matches: glob(/^secrets?\.(?:json|ya?ml|toml|ini)$/),
  },
  {
    pattern: 'id_rsa, id_dsa, id_ecdsa, id_ed25519 (+_sk)',
    why: 'an ssh private key (the .pub beside it is public and ships)',
    matches: glob(/^id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?$/),
  },
  { pattern: '.ssh/', why: 'ssh keys, known hosts and host aliases', matches: under('.ssh') },
  { pattern: '.gnupg/', why: 'a GnuPG keyring', matches: under('.gnupg') },
  {
    pattern: '*.key',
    why: 'a private key by convention (a binary DER key cannot be recognised by its content)',
    matches: glob(/\.key$/),
  },
  {
    pattern: '*.p12, *.pfx, *.jks, *.keystore',
    why: 'a key store: certificates with their private keys',
    matches: glob(/\.(?:p12|pfx|jks|keystore)$/),
  },
  { pattern: '*.ppk', why: 'a PuTTY private key', matches: glob(/\.ppk$/) },
  { pattern: '.aws/', why: 'AWS access keys (credentials) and profiles (config)', matches: under('.aws') },
  { pattern: '.azure/', why: "the Azure CLI's tokens", matches: under('.azure') },
  { pattern: '.config/gcloud/', why: "gcloud's credential database", matches: under('gcloud') },
  {
    pattern: 'application_default_credentials.json',
    why: "Google Cloud's application default credentials",
    matches: name('application_default_credentials.json'),
  },
  {
    pattern: 'credentials.json, client_secret*.json',
    why: 'Google service or OAuth client credentials by convention',
    matches: glob(/^(?:credentials\.json|client_secret.*\.json)$/),
  },
  {
    pattern: '.netrc, _netrc',
    why: 'logins for hosts (git, pip, wandb) in plain text',
    matches: glob(/^[._]netrc$/),
  },
  { pattern: '.npmrc', why: 'npm registry tokens (_authToken)', matches: name('.npmrc') },
  { pattern: '.pypirc', why: 'PyPI upload tokens', matches: name('.pypirc') },
  {
    pattern: '.docker/config.json',
    why: 'container registry logins',
    matches: tail('.docker', 'config.json'),
  },
  {
    pattern: '.kube/config, kubeconfig',
    why: 'Kubernetes cluster credentials',
    matches: (s) => tail('.kube', 'config')(s) || name('kubeconfig')(s),
  },
  {
    pattern: '.git-credentials',
    why: "git's credential store, in plain text",
    matches: name('.git-credentials'),
  },
  { pattern: '.config/gh/hosts.yml', why: "the GitHub CLI's token", matches: tail('gh', 'hosts.yml') },
  {
    pattern: '.cargo/credentials(.toml)',
    why: 'crates.io tokens',
    matches: (s) => tail('.cargo', 'credentials')(s) || tail('.cargo', 'credentials.toml')(s),
  },
  { pattern: '.gem/credentials', why: 'RubyGems API keys', matches: tail('.gem', 'credentials') },
  {
    pattern: 'huggingface/token',
    why: 'a Hugging Face access token',
    matches: (s) => tail('huggingface', 'token')(s) || tail('.huggingface', 'token')(s),
  },
  { pattern: 'kaggle.json', why: 'a Kaggle API key', matches: name('kaggle.json') },
  { pattern: '.htpasswd', why: 'password hashes', matches: name('.htpasswd') },
  {
    pattern: '*.tfstate(.backup)',
    why: "Terraform state: its resources' secrets in plain text",
    matches: glob(/\.tfstate(?:\.backup)?$/),
  },
  {
    pattern: '.pgpass, .my.cnf',
    why: 'database passwords',
    matches: glob(/^(?:\.pgpass|\.my\.cnf)$/),
  },
  { pattern: '.s3cfg, .boto', why: 'S3 / Cloud Storage keys', matches: glob(/^(?:\.s3cfg|\.boto)$/) },
  { pattern: '.vault-token', why: 'a HashiCorp Vault token', matches: name('.vault-token') },
  {
    pattern: '.terraformrc, terraform.rc, .terraform.d/credentials.tfrc.json',
    why: 'Terraform registry and cloud tokens',
    matches: (s) =>
      glob(/^(?:\.terraformrc|terraform\.rc)$/)(s) || tail('.terraform.d', 'credentials.tfrc.json')(s),
  },
  {
    pattern: '.m2/settings.xml, .gradle/gradle.properties',
    why: 'Maven and Gradle repository passwords',
    matches: (s) => tail('.m2', 'settings.xml')(s) || tail('.gradle', 'gradle.properties')(s),
  },
  { pattern: 'rclone.conf', why: "rclone's cloud storage keys", matches: name('rclone.conf') },
  { pattern: '.dockercfg', why: 'container registry logins (the old format)', matches: name('.dockercfg') },
  { pattern: '.databrickscfg', why: 'Databricks tokens', matches: name('.databrickscfg') },
  { pattern: '.oci/', why: 'Oracle Cloud API keys and profiles', matches: under('.oci') },
  { pattern: '*.kdbx', why: 'a KeePass password database', matches: glob(/\.kdbx$/) },
];

/** The row that refuses `path` (relative, `/`-separated), if any. */
export function secretRowOf(path: string): SecretRow | undefined {
  const segments = path.toLowerCase().split('/');
  return SECRET_FILES.find((row) => row.matches(segments));
}

/**
 * What marks a private key in a file's bytes: PEM headers (`-----BEGIN RSA PRIVATE KEY-----`,
 * `… OPENSSH PRIVATE KEY-----`, `… ENCRYPTED PRIVATE KEY-----`, `… PGP PRIVATE KEY BLOCK-----`), also
 * inside JSON such as a service-account key, and PuTTY's key file header.
 */
const PRIVATE_KEY = /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d+:/;

/**
 * A PEM header base64-encoded from its first byte (`LS0tLS1CRUdJTi` is `-----BEGIN `), as a Kubernetes
 * Secret's `data:` or a CI variable holds a whole key file: decoded and tested like the plain ones.
 */
const ENCODED_PEM = /LS0tLS1CRUdJTi[A-Za-z0-9+/]{0,64}/g;

/** Longest marker, so a reader that scans in chunks keeps this many bytes of the previous chunk. */
export const PRIVATE_KEY_MARKER_MAX = 96;

/** The private-key marker in `bytes` (read as latin1: every byte one character), if any. */
export function privateKeyMarkerIn(bytes: Buffer): string | undefined {
  const text = bytes.toString('latin1');
  const plain = PRIVATE_KEY.exec(text)?.[0];
  if (plain !== undefined) return plain;
  for (const m of text.matchAll(ENCODED_PEM)) {
    const header = PRIVATE_KEY.exec(Buffer.from(m[0], 'base64').toString('latin1'))?.[0];
    if (header !== undefined) return `${header} (base64)`;
  }
  return undefined;
}
