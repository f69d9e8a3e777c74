-- Many teams, one pool (docs/operations.md "Accounts and usage"): every principal belongs to exactly one
-- account, accounts form a tree under `root` (organisation → team), each with a fair-share weight. An
-- existing database places every principal in `default`, so nothing needs setting up.
--
-- The usage ledger: one row per lease and card model, written once when the lease's cards stop being its
-- task's (RELEASED, or QUARANTINED when its worker was lost), with the card-seconds it held them. The
-- primary key makes a second charge of the same lease impossible, whatever order reports arrive in.

CREATE TABLE accounts (
  name        TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
  parent      TEXT REFERENCES accounts(name),
  weight      INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000000),
  description TEXT CHECK (description IS NULL OR length(description) <= 500),
  created_at  INTEGER NOT NULL,
  CHECK ((name = 'root') = (parent IS NULL)),
  CHECK (parent IS NULL OR parent <> name)
) WITHOUT ROWID;

INSERT INTO accounts (name, parent, weight, description, created_at)
VALUES ('root', NULL, 1, 'the organisation: every account is under it', 0),
       ('default', 'root', 1, 'principals placed nowhere else', 0);

ALTER TABLE principals ADD COLUMN account TEXT NOT NULL DEFAULT 'default';

CREATE TABLE usage_charges (
  lease_id      TEXT NOT NULL REFERENCES leases(id),
  model         TEXT NOT NULL,
  simulated     INTEGER NOT NULL CHECK (simulated IN (0,1)),
  task_id       TEXT NOT NULL,
  principal_id  TEXT NOT NULL,
  account       TEXT NOT NULL,
  grant_id      TEXT,
  cards         INTEGER NOT NULL CHECK (cards >= 1),
  started_at    INTEGER NOT NULL,
  ended_at      INTEGER NOT NULL CHECK (ended_at >= started_at),
  card_seconds  INTEGER NOT NULL CHECK (card_seconds >= 0),
  PRIMARY KEY (lease_id, model, simulated)
) WITHOUT ROWID;

CREATE INDEX usage_charges_by_end ON usage_charges (ended_at);
CREATE INDEX usage_charges_by_account ON usage_charges (account, ended_at);
