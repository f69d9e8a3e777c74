-- Issue 23 §2: an agent reviewer's APPROVE above the operator's ceiling is refused (NEEDS_PERSON) and
-- the revision is flagged for a person. One row per revision: the latest refusal, shown in the review
-- queue as needs_person. Pruning a revision drops its flag.
CREATE TABLE review_escalations (
  revision_id TEXT PRIMARY KEY REFERENCES revisions(id) ON DELETE CASCADE,
  proposal_id TEXT NOT NULL,
  reviewer_id TEXT NOT NULL REFERENCES principals(id),
  clause      TEXT NOT NULL,
  reason      TEXT NOT NULL,
  attempts    INTEGER NOT NULL CHECK (attempts >= 1),
  at          INTEGER NOT NULL
) WITHOUT ROWID;
