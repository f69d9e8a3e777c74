-- Quotas per account and card model (docs/operations.md "Accounts and usage", ADR 0048): beside the
-- account-wide quota (020, which counts cards of every model), a nominal share, a borrowing limit and an
-- optional card-hour budget per period for the cards of one model. `model` is the name as the operator
-- gave it ("H100"); it covers the cards whose model has those words (case-insensitive, whole words, as a
-- task's `cards.model` matches). `model_key` is its lower-case words joined by single spaces ("h100"),
-- so "H100" and "h100" are one quota. Both apply: a task must fit its account's account-wide quota and
-- the quota of the model it lands on (and those of every account above it).

CREATE TABLE account_model_quotas (
  account           TEXT NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
  model_key         TEXT NOT NULL CHECK (length(model_key) BETWEEN 1 AND 64),
  model             TEXT NOT NULL CHECK (length(model) BETWEEN 1 AND 64),
  nominal_cards     INTEGER CHECK (nominal_cards IS NULL OR nominal_cards BETWEEN 0 AND 100000),
  borrowing_limit   INTEGER CHECK (borrowing_limit IS NULL OR borrowing_limit BETWEEN 0 AND 100000),
  budget_card_hours REAL CHECK (budget_card_hours IS NULL OR (budget_card_hours > 0 AND budget_card_hours <= 100000000)),
  budget_period     TEXT CHECK (budget_period IS NULL OR budget_period IN ('day', 'week', 'month')),
  CHECK (borrowing_limit IS NULL OR nominal_cards IS NOT NULL),
  CHECK ((budget_card_hours IS NULL) = (budget_period IS NULL)),
  CHECK (nominal_cards IS NOT NULL OR budget_card_hours IS NOT NULL),
  PRIMARY KEY (account, model_key)
) WITHOUT ROWID;
