-- Qualification runs (DESIGN §11): one row per run, its progress steps, and the evidence document.
-- A RUNNING run reserves `reserved_cards` of its worker: the cards are cordoned (table cordons) and only
-- tasks owned by the run's own submitter principal may be scheduled onto them
-- (docs/decisions/0008-qualification-cordons.md). The reservation ends when the run leaves RUNNING;
-- the cordons stay unless the verdict is PASSED.

CREATE TABLE qualification_runs (
  id             TEXT PRIMARY KEY,
  worker_id      TEXT NOT NULL,
  state          TEXT NOT NULL CHECK (state IN ('RUNNING','PASSED','FAILED','INCONCLUSIVE','CANCELLED')),
  submitter_kind TEXT NOT NULL CHECK (submitter_kind IN ('scripted','claude','codex')),
  requested_by   TEXT NOT NULL REFERENCES principals(id),
  submitter_id   TEXT NOT NULL UNIQUE REFERENCES principals(id),
  reviewer_id    TEXT NOT NULL UNIQUE REFERENCES principals(id),
  requested      TEXT NOT NULL CHECK (json_valid(requested)),       -- the ladder asked for
  ladder         TEXT NOT NULL CHECK (json_valid(ladder)),          -- the counts that run, ascending
  skipped        TEXT NOT NULL CHECK (json_valid(skipped)),         -- [{cards, reason}]
  reserved_cards TEXT NOT NULL CHECK (json_valid(reserved_cards)),  -- card indexes, ascending
  evidence       TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
  digest         TEXT CHECK (digest IS NULL OR length(digest) = 64),
  detail         TEXT,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  finished_at    INTEGER,
  CHECK (submitter_id <> reviewer_id),
  CHECK ((state = 'RUNNING') = (finished_at IS NULL)),
  CHECK ((state IN ('PASSED','FAILED','INCONCLUSIVE')) = (evidence IS NOT NULL AND digest IS NOT NULL))
);
-- One run at a time per worker: two runs would fight over the same cards.
CREATE UNIQUE INDEX qualification_one_running_per_worker ON qualification_runs (worker_id) WHERE state = 'RUNNING';

-- Progress, one line per step, in order.
CREATE TABLE qualification_steps (
  run_id TEXT NOT NULL REFERENCES qualification_runs(id),
  seq    INTEGER NOT NULL CHECK (seq >= 1),
  at     INTEGER NOT NULL,
  cards  INTEGER,
  text   TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
